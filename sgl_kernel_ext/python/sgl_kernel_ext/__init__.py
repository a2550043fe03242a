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

The sglang plugin (``sgl_kernel_ext.sglang_plugin``) makes sglang call
``copy_to_gpu_no_ce`` in place of sgl_kernel's.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = [
    "NAMESPACE",
    "MAX_N",
    "copy_to_gpu_no_ce",
    "copy_to_gpu_no_ce_fallback",
    "ensure_loaded",
    "load_jit",
    "source_dir",
]

NAMESPACE = "sgl_kernel_ext"
MAX_N = 512
_SOURCES = ("copy.cu", "registration.cc")

_loaded_from: str | None = None
_ops: dict = {}  # op name -> torch.ops handle, looked up once (the copy is on a hot path)


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
    if _registered(namespace):
        return namespace
    from ._build import prepare

    cxx, nvcc, include_dirs = prepare()
    import torch.utils.cpp_extension as cpp_extension

    defines = [f"-DSGL_KERNEL_EXT_NAMESPACE={namespace}", *(extra_cflags or [])]
    srcs = sources or [str(source_dir() / name) for name in _SOURCES]
    cpp_extension.load(
        name=f"{namespace}_jit",
        sources=srcs,
        extra_cflags=cxx + defines,
        extra_cuda_cflags=nvcc + defines,
        extra_include_paths=include_dirs,
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


def _op(name: str):
    op = _ops.get(name)
    if op is None:
        ensure_loaded()
        op = _ops[name] = getattr(torch.ops.sgl_kernel_ext, name)
    return op


def copy_to_gpu_no_ce(input: torch.Tensor, output: torch.Tensor) -> None:
    """Copy a 1-D int32 CPU tensor of 1..512 elements into a CUDA tensor of the
    same size through a kernel argument (no copy engine)."""
    _op("copy_to_gpu_no_ce")(input, output)


def copy_to_gpu_no_ce_fallback(input: torch.Tensor, output: torch.Tensor) -> None:
    """Benchmark-only: like copy_to_gpu_no_ce but always the fallback kernel."""
    _op("copy_to_gpu_no_ce_fallback")(input, output)

