"""Which lengths each released kernel's copy_to_gpu_no_ce has, and where the DeepGEMM runner calls it.

The patched runner (sglang 0003, sglang-kt 0002) sends its per-expert counts only in lengths every
released kernel has (64 and 72), so the fix needs no kernel of its own; these tables say what a stock
runner would hit with the installed kernel."""

from __future__ import annotations

RUNNER = "sglang/srt/layers/moe/moe_runner/deep_gemm.py"  # wheel path of the DeepGEMM MoE runner
RUNNER_LENGTHS = (64, 72)  # the lengths the patched runner sends

# The exact kernels copy_to_gpu_no_ce has in each released kernel (any other N raises `unexpected N`):
# the copy_to_gpu_no_ce_impl<N> symbols of sglang-kernel's sm90/ and sm100/ common_ops.abi3.so; for
# sgl-kernel 0.3.21 (and kt-kernel's bundle of it, 0.3.21.post2) the fork's copy.cu, blob 09719f51.
KERNEL_N: dict[str, tuple[int, ...]] = {
    "0.3.21": (64, 72),
    "0.3.21.post2": (64, 72),
    "0.4.6.post1": (32, 64, 72),
    "0.4.7": (32, 64, 72),
    "0.4.9": (32, 64, 72),
    "0.4.10": (32, 64, 72),
}


def kernel_lengths(version: str | None) -> tuple[int, ...] | None:
    return KERNEL_N.get(version or "")
