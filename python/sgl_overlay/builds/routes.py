"""Which lengths each released kernel's copy_to_gpu_no_ce has, and where the DeepGEMM runner calls it.

The patched runner (sglang 0003, sglang-kt 0002) sends its per-expert counts only in lengths the
target's released kernels have, so the fix needs no kernel of its own; these tables say what a runner
would hit with the installed kernel."""

from __future__ import annotations

RUNNER = "sglang/srt/layers/moe/moe_runner/deep_gemm.py"  # wheel path of the DeepGEMM MoE runner
# The lengths each target's patched runner sends: N itself where it is one of them, else pieces of 64.
RUNNER_LENGTHS: dict[str, tuple[int, ...]] = {"sglang": (32, 64, 72), "sglang-kt": (64, 72)}

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
