"""Probe: sglang's real ``KimiK3MoE._forward_mega_experts`` on 4 EP ranks at once
(processes forked after one import of sglang, joined over torch.distributed gloo);
the fused MegaMoE kernel is the expert-parallel reference MoE of
mega_moe_standin.py, a real all-gather + all-reduce on every launch.

argv: modes, then the gloo timeout in seconds; a mode is "patched" (the tree's own
pass count), "rank-local" (the pass count replaced by this rank's own rows: what a
rank-local decision does) or "stock" (the tree as it is). Each round states a layout through sglang's
``get_parallel().override`` and publishes the per-DP token counts through sglang's
``set_dp_buffer_len`` as MLP sync does (padded to attention TP); each rank then
holds the rows that layout gives it:

- "dp4": attention DP 4, attention TP 1: each rank its DP rank's batch (some empty);
- "dp2_sp": attention DP 2, attention TP 2 (SP-MoE): half its DP rank's padded batch;
- "tp4_sp": attention TP 4, no DP: a quarter of the batch padded to 4 (the DP counts
  left over from the previous round must not matter);
- "tp4_unpadded": attention TP 4, no DP, ``--disable-attn-tp-gather``: a batch whose
  rows do not divide by 4 stays whole on every rank.

Token counts come from one fixed seed, the same on every rank. Prints {"plan": [...],
mode: {"ranks": {rank: {"rounds": [{"layout", "rows", "launches", "max_error",
"max_ref", "out_rows"}], "error"}}, "hung": [ranks that sent nothing by the join
deadline], "seconds"}}.
"""

import json
import multiprocessing as mp
import random
import socket
import sys
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from mega_moe_standin import StandIn, batch, expected, k3_moe  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.layers import dp_attention  # noqa: E402
from sglang.srt.layers.moe.utils import MoeA2ABackend, get_moe_a2a_backend  # noqa: E402
from sglang.srt.models import kimi_k3  # noqa: E402
from sglang.srt.runtime_context import get_flags, get_parallel  # noqa: E402

WORLD = 4
CAP = 8
ROUNDS = 3
LAYOUTS = ("dp4", "dp2_sp", "tp4_sp", "tp4_unpadded")


def ceil_align(n: int, a: int) -> int:
    return -(-n // a) * a


def plan(seed: int = 0):
    """[(layout, parallel fields, per-DP counts or None, rows of each rank)]."""
    rng = random.Random(seed)
    rounds = []
    for _ in range(ROUNDS):
        for layout in LAYOUTS:
            if layout == "dp4":
                counts = [rng.choice([0, rng.randint(1, 3 * CAP)]) for _ in range(WORLD)]
                counts[rng.randrange(WORLD)] = 0
                counts[rng.randrange(WORLD)] = rng.randint(CAP + 1, 3 * CAP)
                fields, rows = dict(attn_dp_size=4, attn_tp_size=1, attn_dp_enabled=True), counts
            elif layout == "dp2_sp":
                counts = [ceil_align(rng.randint(0, 5 * CAP), 2) for _ in range(2)]
                fields = dict(attn_dp_size=2, attn_tp_size=2, attn_dp_enabled=True)
                rows = [counts[r // 2] // 2 for r in range(WORLD)]
            elif layout == "tp4_sp":
                n = ceil_align(rng.randint(1, 8 * CAP), 4)
                counts, rows = None, [n // 4] * WORLD
                fields = dict(attn_dp_size=1, attn_tp_size=4, attn_dp_enabled=False)
            else:
                n = rng.randint(CAP + 1, 3 * CAP)
                n += n % 4 == 0
                counts, rows = None, [n] * WORLD
                fields = dict(attn_dp_size=1, attn_tp_size=4, attn_dp_enabled=False, disable_attn_tp_gather=True)
            rounds.append((layout, fields, counts, rows))
    return rounds


def run_rank(rank, port, mode, timeout, queue):
    torch.set_num_threads(1)
    out = {"rounds": [], "error": None}
    try:
        torch.distributed.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=WORLD,
            timeout=timedelta(seconds=timeout),
        )
        if mode == "rank-local":
            kimi_k3._mega_moe_max_rows_per_rank = lambda num_tokens: num_tokens
        get_flags().moe.a2a_backend = MoeA2ABackend.MEGAMOE
        assert get_moe_a2a_backend().is_megamoe()
        standin = StandIn(CAP, group=torch.distributed.group.WORLD)
        standin.install()
        envs.SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK.set(CAP)
        moe = k3_moe()
        for i, (layout, fields, counts, rows) in enumerate(plan()):
            if counts is not None:
                dp_attention.set_dp_buffer_len(sum(counts), counts[rank // fields["attn_tp_size"]], False, counts)
            a = fields["attn_tp_size"]
            with get_parallel().override(
                tp_size=WORLD,
                attn_cp_size=1,
                moe_ep_size=WORLD,
                moe_ep_group=SimpleNamespace(device_group=None),
                attn_tp_group=SimpleNamespace(world_size=a),
                **fields,
            ):
                x, topk = batch(rows[rank], seed=1000 * i + rank)
                standin.launches = []
                y = moe._forward_mega_experts(x, topk)
            ref = expected(x, topk, moe.routed_scaling_factor)
            out["rounds"].append(
                {
                    "layout": layout,
                    "rows": rows[rank],
                    "launches": standin.launches,
                    "max_error": (y.double() - ref).abs().max().item() if rows[rank] else 0.0,
                    "max_ref": ref.abs().max().item() if rows[rank] else 0.0,
                    "out_rows": y.shape[0],
                }
            )
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-2000:]
    queue.put((rank, out))


def run_ranks(mode: str, timeout: float) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    start = time.monotonic()
    procs = [ctx.Process(target=run_rank, args=(r, port, mode, timeout, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    ranks = {}
    deadline = start + 4 * timeout + 30
    while len(ranks) < WORLD and time.monotonic() < deadline:
        try:
            rank, out = queue.get(timeout=max(deadline - time.monotonic(), 0.1))
        except Exception:  # noqa: BLE001 - queue.Empty: the join deadline passed
            break
        ranks[rank] = out
    for p in procs:
        p.join(timeout=1)
        if p.is_alive():
            p.kill()
            p.join()
    hung = [r for r in range(WORLD) if r not in ranks]
    return {"ranks": ranks, "hung": hung, "seconds": time.monotonic() - start}


def main():
    *modes, timeout = sys.argv[1:]
    print(json.dumps({"plan": plan(), **{mode: run_ranks(mode, float(timeout)) for mode in modes}}))


if __name__ == "__main__":
    main()
