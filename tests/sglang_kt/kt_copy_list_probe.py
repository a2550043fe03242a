"""Probe: which op the real DeepGEMM runner of sglang-kt (``copy_list_to_gpu_no_ce`` in
``srt/layers/moe/moe_runner/deep_gemm.py``) sends a list of per-expert counts to, without
and then with sgl_kernel_ext importable.

Usage: python kt_copy_list_probe.py '<json list of counts>'   (PYTHONPATH: the sglang root
first). Prints one JSON object on its last line: ``without_ext`` and ``with_ext``, each the
calls that reached ``sgl_kernel.elementwise.copy_to_gpu_no_ce`` and ``sgl_kernel_ext``'s
copier. See test_kt_deep_gemm_copy_list.py for the stand-ins.
"""

import json
import sys
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
STUBS = HERE / "kt_native_stubs"
EXT_PYTHON = HERE.parents[1] / "sgl_kernel_ext" / "python"


def _ext_extension_stand_in(calls: list) -> types.ModuleType:
    """``sgl_kernel_ext._C`` (links CUDA): its ``list_copier`` records each call."""
    module = types.ModuleType("sgl_kernel_ext._C")

    def list_copier(name, original):
        def copy(values):
            calls.append({"copier": name, "original": original.__qualname__, "values": values})
            return "sgl_kernel_ext"

        return copy

    module.list_copier = list_copier
    return module


def main() -> None:
    counts = json.loads(sys.argv[1])
    sys.path.insert(0, str(STUBS))
    import sgl_kernel.elementwise

    kernel_calls: list = []

    def copy_to_gpu_no_ce(tensor_cpu, tensor_gpu):
        kernel_calls.append({"n": tensor_cpu.numel(), "dtype": str(tensor_cpu.dtype), "values": tensor_cpu.tolist()})

    sgl_kernel.elementwise.copy_to_gpu_no_ce = copy_to_gpu_no_ce
    # No CUDA device here: the runner's `torch.empty_like(t, device="cuda")` output stays on the CPU.
    empty_like = torch.empty_like
    torch.empty_like = lambda t, device=None, **kw: empty_like(t, **kw)

    from sglang.srt.layers.moe.moe_runner import deep_gemm

    out = {"module": deep_gemm.__file__}
    sys.modules["sgl_kernel_ext"] = None  # not installed: its import fails
    result = deep_gemm.copy_list_to_gpu_no_ce(list(counts))
    out["without_ext"] = {"kernel": kernel_calls[:], "ext": [], "returned": str(type(result).__name__)}

    ext_calls: list = []
    kernel_calls.clear()
    del sys.modules["sgl_kernel_ext"]
    sys.modules["sgl_kernel_ext._C"] = _ext_extension_stand_in(ext_calls)
    sys.path.insert(0, str(EXT_PYTHON))
    import sgl_kernel_ext

    sys.modules["sgl_kernel_ext._C"].MAX_N = sgl_kernel_ext.MAX_N
    lookup = getattr(deep_gemm, "_sgl_kernel_ext_copy_list_to_gpu_no_ce", None)
    if lookup is not None:
        lookup.cache_clear()  # the first call above found no sgl_kernel_ext
    result = deep_gemm.copy_list_to_gpu_no_ce(list(counts))
    out["with_ext"] = {
        "kernel": kernel_calls[:],
        "ext": ext_calls,
        "returned": result if isinstance(result, str) else type(result).__name__,
        "ext_file": sgl_kernel_ext.__file__,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
