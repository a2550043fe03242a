"""sgl-kernel's copy_to_gpu_no_ce (every length 1..512) as a standalone torch extension.

The CUDA source is sgl-kernel's csrc/elementwise/copy.cu after
patches/sgl-kernel/0001-*.patch, unchanged; the op is registered as
``torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()``,
the schema sgl-kernel uses for ``torch.ops.sgl_kernel.copy_to_gpu_no_ce``.

- ``copy_to_gpu_no_ce(input, output)``: the op as sgl-kernel dispatches it.
- ``copy_to_gpu_no_ce_fallback(input, output)``: benchmark-only, forces the one
  fallback kernel at any N.
- ``load_jit()``: compile the sources on the fly with torch.utils.cpp_extension
  instead of importing the prebuilt ``sgl_kernel_ext._C``.
- ``patch_sgl_kernel()``: make an installed sgl_kernel use this op (what the
  sglang plugin in ``sgl_kernel_ext.sglang_plugin`` does).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

__all__ = [
    "NAMESPACE",
    "MAX_N",
    "copy_to_gpu_no_ce",
    "copy_to_gpu_no_ce_fallback",
    "ensure_loaded",
    "load_jit",
    "patch_sgl_kernel",
    "source_dir",
]

NAMESPACE = "sgl_kernel_ext"
MAX_N = 512
_SOURCES = ("copy.cu", "registration.cc")

_loaded_from: str | None = None


def _registered(namespace: str = NAMESPACE) -> bool:
    try:
        getattr(getattr(torch.ops, namespace), "copy_to_gpu_no_ce")
    except (AttributeError, RuntimeError):
        return False
    return True


def source_dir() -> Path:
    """Where copy.cu and registration.cc are: inside an installed package
    (``_csrc``), else the source tree's ``csrc``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_csrc", here.parents[1] / "csrc"):
        if all((candidate / name).is_file() for name in _SOURCES):
            return candidate
    raise FileNotFoundError(f"copy.cu/registration.cc not found next to {here}")


def load_jit(
    build_directory: str | None = None,
    namespace: str = NAMESPACE,
    sources: list[str] | None = None,
    extra_cflags: list[str] | None = None,
    verbose: bool = False,
) -> str:
    """Compile and load the extension with torch.utils.cpp_extension.load.

    Returns the op namespace. ``sources``/``namespace`` let the tests build
    another copy.cu (e.g. the unpatched pre-image) next to this one.
    """
    global _loaded_from
    from ._build import compile_flags, default_arch_list, ensure_cuda_home, extra_include_dirs

    cuda_home = ensure_cuda_home()
    import torch.utils.cpp_extension as cpp_extension

    if cuda_home and cpp_extension.CUDA_HOME != cuda_home:
        # imported before ensure_cuda_home() could set the environment
        cpp_extension.CUDA_HOME = cuda_home

    if _registered(namespace):
        return namespace
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = default_arch_list()
    cxx, nvcc = compile_flags()
    defines = [f"-DSGL_KERNEL_EXT_NAMESPACE={namespace}", *(extra_cflags or [])]
    srcs = sources or [str(source_dir() / name) for name in _SOURCES]
    cpp_extension.load(
        name=f"{namespace}_jit",
        sources=srcs,
        extra_cflags=cxx + defines,
        extra_cuda_cflags=nvcc + defines,
        extra_include_paths=extra_include_dirs(cpp_extension.CUDA_HOME),
        build_directory=build_directory,
        is_python_module=False,
        verbose=verbose,
    )
    if namespace == NAMESPACE:
        _loaded_from = "jit"
    return namespace


def ensure_loaded() -> str:
    """Load the prebuilt extension (``sgl_kernel_ext._C``) unless the op is
    already registered (e.g. by load_jit()). Returns where it came from."""
    global _loaded_from
    if _registered():
        return _loaded_from or "already registered"
    try:
        from . import _C  # noqa: F401  (registers torch.ops.sgl_kernel_ext)
    except ImportError as exc:
        raise ImportError(
            "sgl_kernel_ext._C is not built: `pip install --no-build-isolation "
            "./sgl_kernel_ext`, or call sgl_kernel_ext.load_jit() first"
        ) from exc
    _loaded_from = "prebuilt"
    return _loaded_from


def copy_to_gpu_no_ce(input: torch.Tensor, output: torch.Tensor) -> None:
    """Copy a 1-D int32 CPU tensor of 1..512 elements into a CUDA tensor of the
    same size through a kernel argument (no copy engine)."""
    if not _registered():
        ensure_loaded()
    torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce(input, output)


def copy_to_gpu_no_ce_fallback(input: torch.Tensor, output: torch.Tensor) -> None:
    """Benchmark-only: like copy_to_gpu_no_ce but always the fallback kernel."""
    if not _registered():
        ensure_loaded()
    torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce_fallback(input, output)


def patch_sgl_kernel() -> list[str]:
    """Point an imported sgl_kernel at this op, in this process.

    Replaces ``sgl_kernel.elementwise.copy_to_gpu_no_ce`` (the name sglang's
    ``srt/layers/moe/moe_runner/deep_gemm.py`` imports at each call) and the
    ``sgl_kernel.copy_to_gpu_no_ce`` re-export. ``torch.ops.sgl_kernel`` itself
    is left alone. Returns the names replaced.
    """
    import sys

    import sgl_kernel.elementwise as elementwise

    replaced = []
    original = getattr(elementwise, "copy_to_gpu_no_ce", None)
    elementwise.copy_to_gpu_no_ce = copy_to_gpu_no_ce
    replaced.append("sgl_kernel.elementwise.copy_to_gpu_no_ce")
    top = sys.modules.get("sgl_kernel")
    if top is not None and original is not None and getattr(top, "copy_to_gpu_no_ce", None) is original:
        top.copy_to_gpu_no_ce = copy_to_gpu_no_ce
        replaced.append("sgl_kernel.copy_to_gpu_no_ce")
    return replaced
