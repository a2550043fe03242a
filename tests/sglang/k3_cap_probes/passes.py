"""Probe: sglang's real ``run_mega_routed_experts`` (the shared MegaMoE path) and
``KimiK3MoE._forward_mega_experts`` on one rank, the fused MegaMoE kernel replaced
by a reference MoE (mega_moe_standin.py says what is replaced and why).

argv: ``rows:cap`` pairs. For each, one batch of ``rows`` rows (seeded by ``rows``)
runs through each path with the cap in
SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK. Prints {"shared": {"rows:cap":
result}, "k3": {...}, "warnings": [...]}, a result being {"error_type", "error",
"launches", "out", "max_error", "max_ref"}: "launches" the rows of each fused-kernel
launch, "out" the output rows, "max_error" the largest difference from the reference
MoE over all experts; "warnings" every WARNING sglang logged.
"""

import json
import logging
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from log_lines import WarningLines  # noqa: E402
from mega_moe_standin import StandIn, batch, expected, k3_moe, shared_forward  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

SCALE = 2.5  # the routed scaling factor: applied once per row
ONE_RANK = dict(
    tp_size=1,
    attn_tp_size=1,
    attn_dp_size=1,
    attn_cp_size=1,
    attn_dp_enabled=False,
    moe_ep_size=1,
    moe_ep_group=SimpleNamespace(device_group=None, cpu_group=None),
)


def run(forward, rows: int, cap: int) -> dict:
    standin = StandIn(cap)
    standin.install()
    x, topk = batch(rows, seed=rows)
    result = {"error_type": None, "error": None, "out": None, "max_error": None}
    envs.SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK.set(cap)
    with get_parallel().override(**ONE_RANK):
        try:
            out = forward(x, topk)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            result["error_type"], result["error"] = type(exc).__name__, str(exc)
        else:
            ref = expected(x, topk, SCALE)
            result["out"] = out.float().tolist()
            result["max_error"] = (out.double() - ref).abs().max().item() if rows else 0.0
            result["max_ref"] = ref.abs().max().item() if rows else 0.0
    result["launches"] = standin.launches
    return result


def main():
    lines = WarningLines()
    logging.getLogger("sglang").addHandler(lines)
    moe = k3_moe(routed_scaling=SCALE)
    paths = {"shared": lambda x, topk: shared_forward(x, topk, SCALE), "k3": moe._forward_mega_experts}
    results = {path: {} for path in paths}
    for pair in sys.argv[1:]:
        rows, cap = map(int, pair.split(":"))
        for path, forward in paths.items():
            results[path][pair] = run(forward, rows, cap)
    results["warnings"] = lines.lines
    print(json.dumps(results))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
