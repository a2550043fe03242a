"""Probe: sglang's real MegaMoE layers on 4 EP ranks at once (processes forked after
one import of sglang, joined over torch.distributed gloo); the fused MegaMoE kernel
is the expert-parallel reference MoE of mega_moe_standin.py, a real all-gather +
all-reduce on every launch. Each forward runs two MoE layers: Kimi K3's
``_forward_mega_experts`` then the shared ``run_mega_routed_experts``.

argv: modes, then the gloo timeout in seconds; a mode is "patched" or "stock" (the
tree as it is, under the name the output gives it). Each round states a layout through
sglang's ``get_parallel().override`` and publishes the per-DP token counts through sglang's
``set_dp_buffer_len`` as MLP sync does. Each rank then takes the MoE input rows sglang's
own layer-boundary code gives it (``moe_input_rows``: ``move_rows`` from the attention's
rows to the FFN's, or the attention's rows for an unpadded batch):

- "dp4": attention DP 4, attention TP 1, counts gathered (some ranks empty, some over
  the cap);
- "dp2_sp": attention DP 2, attention TP 2 (SP-MoE);
- "tp4_sp": attention TP 4, no DP: the batch padded to 4 (the DP counts left over from
  the previous round must not matter);
- "tp4_unpadded": attention TP 4, no DP, ``--disable-attn-tp-gather``: a batch whose
  rows do not divide by 4.

Token counts come from one fixed seed, the same on every rank. Prints {"plan": [...],
mode: {"ranks": {rank: {"rounds": [{"layout", "rows", "layers": {"k3" | "shared":
{"launches", "max_error", "max_ref", "out_rows"}}}], "row_reductions", "error"}},
"hung": [ranks that sent nothing by the join deadline], "seconds"}};
"row_reductions" counts the all-reduces on the EP group's CPU group.
"""

import json
import random
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from gloo_ranks import run_ranks  # noqa: E402
from mega_moe_standin import StandIn, batch, expected, k3_moe, shared_forward  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.layers import dp_attention  # noqa: E402
from sglang.srt.layers.layer_boundary.factories import BatchVariant, _ffn_on_rank_rows, _row_layouts  # noqa: E402
from sglang.srt.layers.layer_boundary.layout import batches_are_unpadded  # noqa: E402
from sglang.srt.layers.layer_boundary.ops import move_rows  # noqa: E402
from sglang.srt.layers.moe.utils import MoeA2ABackend, get_moe_a2a_backend  # noqa: E402
from sglang.srt.runtime_context import get_flags, get_parallel  # noqa: E402

WORLD = 4
CAP = 8
ROUNDS = 3
LAYOUTS = ("dp4", "dp2_sp", "tp4_sp", "tp4_unpadded")


def ceil_align(n: int, a: int) -> int:
    return -(-n // a) * a


def plan(seed: int = 0):
    """[(layout, parallel fields, per-DP counts, the batch's rows without DP)]."""
    rng = random.Random(seed)
    rounds = []
    for _ in range(ROUNDS):
        for layout in LAYOUTS:
            if layout == "dp4":
                counts = [rng.choice([0, rng.randint(1, 3 * CAP)]) for _ in range(WORLD)]
                empty, busy = rng.sample(range(WORLD), 2)
                counts[empty], counts[busy] = 0, rng.randint(CAP + 1, 3 * CAP)
                fields, rows = dict(attn_dp_size=4, attn_tp_size=1, attn_dp_enabled=True), None
            elif layout == "dp2_sp":
                # Each DP rank's count padded to attention TP, as MLP sync publishes it.
                counts = [ceil_align(rng.randint(0, 5 * CAP), 2) for _ in range(2)]
                fields, rows = dict(attn_dp_size=2, attn_tp_size=2, attn_dp_enabled=True), None
            elif layout == "tp4_sp":
                counts, rows = None, ceil_align(rng.randint(1, 8 * CAP), 4)
                fields = dict(attn_dp_size=1, attn_tp_size=4, attn_dp_enabled=False)
            else:
                rows = rng.randint(CAP + 1, 3 * CAP)
                rows += rows % 4 == 0
                counts = None
                fields = dict(attn_dp_size=1, attn_tp_size=4, attn_dp_enabled=False, disable_attn_tp_gather=True)
            rounds.append((layout, fields, counts, rows))
    # Within the cap: a DP rank of twice the cap over attention TP 2 (each of its ranks
    # holds the cap), DP ranks at the cap beside small and empty ones, a batch of 4 x cap.
    rounds.append(("dp2_sp", dict(attn_dp_size=2, attn_tp_size=2, attn_dp_enabled=True), [2 * CAP, 2], None))
    rounds.append(("dp4", dict(attn_dp_size=4, attn_tp_size=1, attn_dp_enabled=True), [CAP, 0, 3, CAP], None))
    rounds.append(("tp4_sp", dict(attn_dp_size=1, attn_tp_size=4, attn_dp_enabled=False), None, 4 * CAP))
    return rounds


def moe_input_rows(attention_rows: int) -> int:
    """The rows of this rank's MoE input, as sglang's layer-boundary code lays out an a2a
    MoE's input from the attention's rows (factories._resolve_ffn): an unpadded batch
    stays on the attention's rows, any other is moved to the FFN's."""
    if batches_are_unpadded() and attention_rows % get_parallel().attn_tp_size:
        return attention_rows
    assert _ffn_on_rank_rows(sparse=True, dense_tp_size=None)
    _, attention, local, _ = _row_layouts(BatchVariant.ORDINARY)
    return move_rows(torch.empty(attention_rows, 1), attention, local, None).shape[0]


def run_layer(forward, standin, x, topk, scale):
    standin.launches = []
    y = forward(x, topk)
    ref = expected(x, topk, scale)
    rows = x.shape[0]
    return {
        "launches": standin.launches,
        "max_error": (y.double() - ref).abs().max().item() if rows else 0.0,
        "max_ref": ref.abs().max().item() if rows else 0.0,
        "out_rows": y.shape[0],
    }


def run_rank(rank, out, mode, timeout):
    out.update(rounds=[], row_reductions=0)
    cpu_group = torch.distributed.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    all_reduce = torch.distributed.all_reduce

    def counted_all_reduce(tensor, *args, group=None, **kwargs):
        out["row_reductions"] += group is cpu_group
        return all_reduce(tensor, *args, group=group, **kwargs)

    torch.distributed.all_reduce = counted_all_reduce
    get_flags().moe.a2a_backend = MoeA2ABackend.MEGAMOE
    assert get_moe_a2a_backend().is_megamoe()
    standin = StandIn(CAP, group=torch.distributed.group.WORLD)
    standin.install()
    envs.SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK.set(CAP)
    moe = k3_moe()
    scale = moe.routed_scaling_factor
    layers = {"k3": moe._forward_mega_experts, "shared": lambda x, t: shared_forward(x, t, scale)}
    for i, (layout, fields, counts, rows) in enumerate(plan()):
        a = fields["attn_tp_size"]
        if counts is not None:
            dp_rank = rank // a
            dp_attention.set_dp_buffer_len(sum(counts), counts[dp_rank], False, list(counts))
            rows = counts[dp_rank]
        with get_parallel().override(
            tp_size=WORLD,
            attn_cp_size=1,
            attn_tp_rank=rank % a,
            dwdp_size=1,
            moe_ep_size=WORLD,
            moe_ep_group=SimpleNamespace(device_group=None, cpu_group=cpu_group),
            attn_tp_group=SimpleNamespace(world_size=a),
            **{"disable_attn_tp_gather": False, **fields},
        ):
            local_rows = moe_input_rows(rows)
            x, topk = batch(local_rows, seed=1000 * i + rank)
            result = {"layout": layout, "rows": local_rows, "layers": {}}
            out["rounds"].append(result)
            for name, forward in layers.items():
                result["layers"][name] = run_layer(forward, standin, x, topk, scale)


def run_mode(mode: str, timeout: float) -> dict:
    return run_ranks(lambda rank, out: run_rank(rank, out, mode, timeout), WORLD, timeout, deadline=4 * timeout + 30)


def main():
    *modes, timeout = sys.argv[1:]
    print(json.dumps({"plan": plan(), **{mode: run_mode(mode, float(timeout)) for mode in modes}}))


if __name__ == "__main__":
    main()
