"""Probe: sglang's real MegaMoE layers on 4 EP ranks with attention DP, over gloo, in the
way a server runs them with CUDA graphs: each rank captures its graphs in 0.5.23's order,
then forwards in which some ranks replay a graph while others run eager.

A captured graph is what the layers launched while sglang's own ``model_capture_mode()``
was on (``get_is_capture_mode()`` True), recorded per graph: a replay repeats exactly those
fused-kernel launches (each a real gloo exchange, mega_moe_standin.py) and runs no Python of
the layer, as a CUDA graph replays its kernels. An eager rank runs the layers. Every forward
runs two MegaMoE layers, Kimi K3's ``_forward_mega_experts`` then the shared
``run_mega_routed_experts``. A rank that makes a different number of exchanges than its
peers waits for them: gloo reports the closed connection, or its timeout, or the join
deadline reports the rank as hung.

argv: scenarios, then the gloo timeout in seconds. Scenarios (cap 8 rows per rank):

- "graphs_gathered": MLP sync gathers every DP rank's count. Prefill graphs (SUM_LEN
  buckets, each rank its own) then decode graphs, largest first; forwards: prefill graphs
  of different buckets beside an idle eager rank, every rank on one decode graph, then all
  eager over the cap.
- "graphs_own": the layout in which other backends leave each DP rank its own count
  (``--enable-dp-lm-head --moe-dense-tp-size 1``). Decode graphs; in each forward every rank
  holds its own batch, and sglang's own code decides the rest: ``require_mlp_tp_gather()``,
  the scheduler's MLP-sync all-gather (``MLPSyncBatchInfo``, over gloo) and
  ``_update_gather_batch``, then ``DecodeCudaGraphRunner.can_run_graph``: replay (at the
  smallest graph that holds the batch the runner sizes) or eager. Within the cap (a rank's
  batch outgrew the largest graph), then over it.
- "prefill_graph_over_cap": a prefill bucket of 16 rows captured before decode graphs.
- "prefill_graph_sp": attention DP 2 x attention TP 2: a DP rank replays a prefill graph
  whose ranks each hold the cap (twice the cap per DP rank, split over attention TP) beside
  an idle DP rank that runs eager.
- "adaptive_steps": adaptive speculative decoding, one decode graph per step, the initial
  step captured first and then the rest ascending (1 request; rows = step + 1); a forward
  with the ranks on different steps.
- "adaptive_steps_over_cap": as adaptive_steps with 2 requests (step 4: 10 rows).
- "should_use_own" / "should_use_gathered": each rank's ``should_use_mega_moe`` for rows
  [2, 12, 0, 5], the counts published as in graphs_own's layout or gathered.

Prints {scenario: {"ranks": {rank: {"captures": {graph: {"launches", "error"}},
"forwards": [{"k3": launches, "shared": launches}], "decisions", "error"}}, "hung",
"seconds"}}, "launches" the rows of each fused-kernel launch.
"""

import json
import sys
import warnings
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from gloo_ranks import run_ranks  # noqa: E402
from mega_moe_standin import NUM_EXPERTS, StandIn, batch, k3_moe, shared_forward  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.layers import dp_attention  # noqa: E402
from sglang.srt.layers.moe import mega_moe  # noqa: E402
from sglang.srt.layers.moe.utils import MoeA2ABackend  # noqa: E402
from sglang.srt.managers.scheduler_components.dp_attn import MLPSyncBatchInfo, _update_gather_batch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner  # noqa: E402
from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode  # noqa: E402
from sglang.srt.runtime_context import get_flags, get_parallel  # noqa: E402
from sglang.srt.utils.common import require_mlp_tp_gather  # noqa: E402

WORLD = 4
CAP = 8
SHOULD_USE_ROWS = [2, 12, 0, 5]
# The adaptive steps: the initial step's graphs first, then every step ascending.
INITIAL_STEP, STEPS = 3, (1, 2, 3, 4)

# scenario -> (gathered counts?, [(graph, rows)] in capture order, [forward]); a forward is
# one action per rank: ("replay", graph, rows it holds) or ("eager", rows).
PREFILL = [("prefill-8", 8), ("prefill-6", 6)]
DECODE = [("decode-4", 4), ("decode-2", 2), ("decode-1", 1)]


def adaptive_graphs(requests: int) -> list:
    order = [INITIAL_STEP] + [s for s in STEPS if s != INITIAL_STEP]
    return [(f"step-{s}", requests * (s + 1)) for s in order]


SCENARIOS = {
    "graphs_gathered": (
        True,
        PREFILL + DECODE,
        [
            [("replay", "prefill-8", 8), ("replay", "prefill-8", 7), ("replay", "prefill-6", 5), ("eager", 0)],
            [("replay", "decode-4", 4)] * WORLD,
            [("eager", 20), ("eager", 3), ("eager", 0), ("eager", 9)],
        ],
    ),
    # Each rank's own batch; sglang decides replay or eager (decide()).
    "graphs_own": ("own", DECODE, [[2, 1, 1, 2], [4, 3, 1, 6], [4, 2, 1, 12]]),
    "prefill_graph_over_cap": (
        True,
        [("prefill-16", 16), ("prefill-8", 8)] + DECODE,
        [[("replay", "prefill-8", 8)] * (WORLD - 1) + [("eager", 0)]],
    ),
    "prefill_graph_sp": (
        True,
        [("prefill-8", 8), ("prefill-4", 4)] + DECODE,
        [[("replay", "prefill-8", 8)] * 2 + [("eager", 0)] * 2],
    ),
    "adaptive_steps": (
        True,
        adaptive_graphs(1),
        [[("replay", "step-1", 2), ("replay", "step-3", 4), ("replay", "step-4", 5), ("replay", "step-2", 3)]],
    ),
    "adaptive_steps_over_cap": (
        True,
        adaptive_graphs(2),
        [[("replay", "step-1", 4), ("replay", "step-3", 8), ("replay", "step-4", 10), ("replay", "step-2", 6)]],
    ),
}
EVERY_SCENARIO = (*SCENARIOS, "should_use_own", "should_use_gathered")


# Attention TP of a scenario; 1 elsewhere.
ATTN_TP = {"prefill_graph_sp": 2}


def publish(gathered, counts: list, rank: int, attn_tp: int = 1) -> None:
    """The DP counts MLP sync leaves for the forward (set_dp_buffer_len, as sglang does),
    from the rows each rank holds: a DP rank's count is its attention-TP ranks' rows;
    "own": as sglang's scheduler publishes them in graphs_own's layout."""
    if gathered == "own":
        gathered = require_mlp_tp_gather()
    dp_counts = [counts[d * attn_tp] * attn_tp for d in range(len(counts) // attn_tp)]
    mine = dp_counts[rank // attn_tp]
    published = dp_counts if gathered else [mine]
    dp_attention.set_dp_buffer_len(sum(published), mine, False, published)


@contextmanager
def own_layout():
    """--enable-dp-lm-head --moe-dense-tp-size 1, no elastic EP (the only exec config read)."""
    no_elastic_ep = SimpleNamespace(moe=SimpleNamespace(elastic_ep_backend=None))
    tp_group = SimpleNamespace(active_ranks_cpu=torch.ones(WORLD, dtype=torch.int64))
    with (
        patch("sglang.srt.utils.common.get_exec", return_value=no_elastic_ep),
        get_parallel().override(num_dp_ranks=WORLD, moe_dense_tp_size=1, enable_dp_lm_head=True, tp_group=tp_group),
    ):
        yield


def decide(rank: int, bs: list, graph_sizes: list, cpu_group) -> tuple:
    """One decode forward in graphs_own's layout, decided by sglang's scheduler and decode
    graph runner: ("replay", graph, rows) or ("eager", rows). Publishes its counts."""
    info = MLPSyncBatchInfo(
        num_dp_ranks=WORLD,
        tp_size=1,
        cp_size=1,
        num_tokens=bs[rank],
        num_tokens_for_logprob=bs[rank],
        can_run_decode_cuda_graph=True,
        can_run_draft_cuda_graph=True,
        can_run_prefill_cuda_graph=False,
        is_extend_in_batch=False,
        local_can_run_tbo=False,
        local_forward_mode=ForwardMode.DECODE.value,
    )
    info.all_gather(device="cpu", group=cpu_group)
    batch = SimpleNamespace()
    _update_gather_batch(batch, info, require_mlp_tp_gather())
    counts = batch.global_num_tokens
    dp_attention.set_dp_buffer_len(sum(counts), bs[rank], False, counts)
    runner = object.__new__(DecodeCudaGraphRunner)
    runner.__dict__.update(
        ragged_verify_mode=False,
        captured_req_width=1,
        require_mlp_tp_gather=require_mlp_tp_gather(),
        require_mlp_sync=True,
        enable_pdmux=False,
        record_nolora_graph=False,
        disable_padding=False,
        max_bs=max(graph_sizes),
        is_encoder_decoder=False,
        enable_two_batch_overlap=False,
        model_runner=SimpleNamespace(spec_algorithm=SimpleNamespace(is_ngram=lambda: False)),
    )
    forward_batch = SimpleNamespace(
        replace_embeds=None,
        spec_info=None,
        batch_size=bs[rank],
        original_global_num_tokens_cpu=counts,
        lora_ids=None,
        can_run_decode_cuda_graph=batch.can_run_decode_cuda_graph,
    )
    if not runner.can_run_graph(forward_batch):
        return ("eager", bs[rank])
    graph_bs = max(counts) if runner.require_mlp_tp_gather else bs[rank]
    size = min(s for s in graph_sizes if s >= graph_bs)
    return ("replay", f"decode-{size}", bs[rank])


def run_layers(layers, standin, rows, seed):
    x, topk = batch(rows, seed=seed)
    launches = {}
    for name, forward in layers.items():
        standin.launches = []
        forward(x, topk)
        launches[name] = standin.launches
    return launches


def should_use(rank: int, out: dict, gathered) -> None:
    moe = SimpleNamespace(experts=None)
    mega_moe.is_mega_moe_experts_ready = lambda experts: True
    publish(gathered, SHOULD_USE_ROWS, rank)
    out["decisions"] = mega_moe.should_use_mega_moe(moe, torch.empty(SHOULD_USE_ROWS[rank], 1))


def run_rank(rank: int, out: dict, scenario: str, timeout: float) -> None:
    out.update(captures={}, forwards=[], decisions=None)
    get_flags().moe.a2a_backend = MoeA2ABackend.MEGAMOE
    envs.SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK.set(CAP)
    cpu_group = torch.distributed.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    attn_tp = ATTN_TP.get(scenario, 1)
    with get_parallel().override(
        tp_size=WORLD,
        attn_tp_size=attn_tp,
        attn_dp_size=WORLD // attn_tp,
        attn_cp_size=1,
        attn_dp_enabled=True,
        moe_ep_size=WORLD,
        moe_ep_group=SimpleNamespace(device_group=None, cpu_group=cpu_group),
        attn_tp_group=SimpleNamespace(world_size=attn_tp),
    ):
        if scenario.startswith("should_use_"):
            with own_layout():
                should_use(rank, out, True if scenario == "should_use_gathered" else "own")
            return
        gathered, graphs, forwards = SCENARIOS[scenario]
        standin = StandIn(CAP, group=torch.distributed.group.WORLD)
        standin.install()
        moe = k3_moe()
        layers = {
            "k3": moe._forward_mega_experts,
            "shared": lambda x, t: shared_forward(x, t, moe.routed_scaling_factor),
        }
        recorded = {}
        for graph, rows in graphs:
            # Every rank captures every graph at its own bucket, its counts all the bucket.
            with own_layout() if gathered == "own" else nullcontext():
                publish(gathered, [rows] * WORLD, rank, attn_tp)
            capture = out["captures"][graph] = {"launches": None, "error": None}
            try:
                with model_capture_mode():
                    recorded[graph] = capture["launches"] = run_layers(layers, standin, rows, seed=rows)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                capture["error"] = f"{type(exc).__name__}: {exc}"
        if any(c["error"] for c in out["captures"].values()):
            return  # a server whose capture fails does not serve
        for i, actions in enumerate(forwards):
            if gathered == "own":
                with own_layout():
                    action = decide(rank, actions, [size for _, size in graphs], cpu_group)
                out.setdefault("actions", []).append(action)
            else:
                publish(gathered, [action[-1] for action in actions], rank, attn_tp)
                action = actions[rank]
            if action[0] == "replay":
                launches = recorded[action[1]]
                for name in layers:
                    standin.replay(launches[name])
                out["forwards"].append(launches)
            else:
                out["forwards"].append(run_layers(layers, standin, action[1], seed=100 * i + rank))


def run_scenario(scenario: str, timeout: float) -> dict:
    return run_ranks(lambda rank, out: run_rank(rank, out, scenario, timeout), WORLD, timeout, 3 * timeout + 30)


def main():
    *scenarios, timeout = sys.argv[1:]
    assert NUM_EXPERTS % WORLD == 0
    print(json.dumps({scenario: run_scenario(scenario, float(timeout)) for scenario in scenarios}))


if __name__ == "__main__":
    main()
