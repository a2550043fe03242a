"""Probe: call the real ``KimiK3MoE._forward_mega_experts`` with a given row count.

argv: one or more ``rows:cap`` pairs, run in this one process. The module is sglang's own class, made with ``__new__`` and given
only the attributes that method reads; the EP width and group are stated through
sglang's ``get_parallel().override``. Stubbed, because they are native kernels that
cannot run on a CPU: the ``deep_gemm`` module (symmetric buffer, fused MegaMoE
kernel) and ``sglang.kernels.ops.moe.dsv4.mega_moe_pre_dispatch`` (a JIT CUDA
kernel). Prints {"rows:cap": {"error_type", "error", "kernel_rows", "out_rows",
"asserts"}, ...}: "kernel_rows" lists the row count of each launch of the fused
kernel (empty if it was not reached).
"""

import json
import sys
import warnings
from types import ModuleType, SimpleNamespace
from unittest.mock import MagicMock

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from mega_moe_standin import k3_moe  # noqa: E402
from sglang.kernels.ops.moe import dsv4  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

HIDDEN = 8
TOP_K = 2


def main():
    deep_gemm = ModuleType("deep_gemm")
    deep_gemm.get_num_sms = MagicMock(return_value=132)
    deep_gemm.get_symm_buffer_for_mega_moe = MagicMock(
        return_value=SimpleNamespace(x=None, x_sf=None, topk_idx=None, topk_weights=None)
    )
    launched = []

    def fused_kernel(y, *args, **kwargs):
        launched.append(y.shape[0])

    deep_gemm.fp8_fp4_mega_moe = fused_kernel
    sys.modules["deep_gemm"] = deep_gemm
    dsv4.mega_moe_pre_dispatch = MagicMock()

    moe = k3_moe(num_experts=16, intermediate=32, hidden=HIDDEN, fuse_scaling=True, routed_scaling=1.0)
    results = {}
    for pair in sys.argv[1:]:
        rows, cap = map(int, pair.split(":"))
        launched.clear()
        topk_output = SimpleNamespace(
            topk_ids=torch.zeros((rows, TOP_K), dtype=torch.int64),
            topk_weights=torch.zeros((rows, TOP_K)),
        )
        result = {"error_type": None, "error": None, "out_rows": None, "asserts": __debug__}
        with get_parallel().override(
            tp_size=8,
            attn_tp_size=8,
            attn_dp_size=1,
            attn_cp_size=1,
            attn_dp_enabled=False,
            moe_ep_size=8,
            moe_ep_group=SimpleNamespace(device_group=object()),
        ):
            envs.SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK.set(cap)
            try:
                out = moe._forward_mega_experts(torch.zeros((rows, HIDDEN), dtype=torch.bfloat16), topk_output)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                result["error_type"] = type(exc).__name__
                result["error"] = str(exc)
            else:
                result["out_rows"] = out.shape[0]
        result["kernel_rows"] = list(launched)
        results[pair] = result
    print(json.dumps(results))


if __name__ == "__main__":
    main()
