"""sgl-kernel's copy_to_gpu_no_ce (every length 1..512) as a standalone torch extension.

The CUDA source is sgl-kernel's csrc/elementwise/copy.cu after
patches/sgl-kernel/0001-*.patch, unchanged; the op is registered as
``torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()``,
the schema sgl-kernel uses for ``torch.ops.sgl_kernel.copy_to_gpu_no_ce``.

- ``copy_to_gpu_no_ce(input, output)``: the op as sgl-kernel dispatches it.
- ``copy_to_gpu_no_ce_fallback(input, output)``: benchmark-only, forces the one
  fallback kernel at any N.
- ``copy_list_to_gpu_no_ce(values)``: what sglang's caller computes,
  ``torch.tensor(values, dtype=torch.int32)`` on the current CUDA device through the op,
  with one launch and no CPU tensor for an exact list or tuple of 1..MAX_N ints in int32
  (read in C++, ``_C``); any other input takes that stock path, so it gets stock's answer
  or error. ``torch.ops.sgl_kernel_ext.copy_list_to_gpu_no_ce`` is copy.cu's function
  behind the dispatcher (``int[] values``, read by torch's argument parser).
- ``list_copier(original)``: the same one-launch copy in front of another caller
  (``original`` answers every other input), as a C type (the sglang plugin's hooks).
- ``load_jit(build_directory=None)``: compile the sources on the fly with
  torch.utils.cpp_extension instead of importing the prebuilt ``sgl_kernel_ext._C``.

The sglang plugin (``sgl_kernel_ext.sglang_plugin``) makes sglang call
``copy_to_gpu_no_ce`` in place of sgl_kernel's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._build import copy_max_n

__all__ = [
    "NAMESPACE",
    "MAX_N",
    "copy_to_gpu_no_ce",
    "copy_to_gpu_no_ce_fallback",
    "copy_list_to_gpu_no_ce",
    "list_copier",
    "list_entry_point",
    "ensure_loaded",
    "load_jit",
    "source_dir",
]

NAMESPACE = "sgl_kernel_ext"
_SOURCES = ("copy.cu", "registration.cc")

_loaded_from: str | None = None
_module = None  # the loaded sgl_kernel_ext._C module (prebuilt or JIT)
_ops: dict = {}  # op name -> torch.ops handle, looked up once (the copy is on a hot path)


def _registered() -> bool:
    try:
        torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce
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


MAX_N = copy_max_n(source_dir() / "copy.cu")  # copy.cu's kCopyToGpuNoCeMaxN


def load_jit(build_directory: str | None = None, verbose: bool = False) -> str:
    """Compile copy.cu and registration.cc with torch.utils.cpp_extension.load, with the
    flags setup.py uses, and load the result as ``sgl_kernel_ext._C``. Returns where the
    op came from."""
    global _loaded_from, _module
    if _registered():
        return _loaded_from or "already registered"
    from ._build import prepare

    cxx, nvcc, include_dirs = prepare(source_dir() / "copy.cu")
    import torch.utils.cpp_extension as cpp_extension

    name = f"{NAMESPACE}_jit"
    cpp_extension.load(
        name=name,
        sources=[str(source_dir() / src) for src in _SOURCES],
        extra_cflags=cxx,
        extra_cuda_cflags=nvcc,
        extra_include_paths=include_dirs,
        build_directory=build_directory,
        is_python_module=False,
        verbose=verbose,
    )
    directory = build_directory or cpp_extension._get_build_directory(name, verbose)
    _module = _import_module(str(Path(directory) / f"{name}.so"))
    _loaded_from = "jit"
    return _loaded_from


def _import_module(path: str):
    """The JIT build's library as the module ``sgl_kernel_ext._C`` (its init
    function is PyInit__C); the library is already loaded, so this only runs
    the module init."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(f"{__name__}._C", path)
    spec = importlib.util.spec_from_file_location(f"{__name__}._C", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def ensure_loaded() -> str:
    """Load the prebuilt extension (``sgl_kernel_ext._C``) unless the op is
    already registered (e.g. by load_jit()). Returns where it came from."""
    global _loaded_from, _module
    if _registered():
        return _loaded_from or "already registered"
    try:
        from . import _C  # registers torch.ops.sgl_kernel_ext
    except ImportError as exc:
        raise ImportError(
            "sgl_kernel_ext._C is not built: `pip install --no-build-isolation "
            "./sgl_kernel_ext`, or call sgl_kernel_ext.load_jit() first"
        ) from exc
    _module = _C
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


_copiers: dict = {}  # original -> its list copier type, made once


def list_copier(original):
    """A C type whose call is the one-launch copy of an exact list or tuple of 1..MAX_N
    ints in int32 (a new int32 tensor on the current CUDA device) and ``original(...)``
    for any other arguments (``__wrapped__``). Made once per ``original``."""
    copier = _copiers.get(original)
    if copier is None:
        module = _extension_module()
        name = getattr(original, "__name__", "copy_list_to_gpu_no_ce")
        copier = _copiers[original] = module.list_copier(f"sgl_kernel_ext._C.{name}", original)
    return copier


def _extension_module():
    ensure_loaded()
    if _module is None:
        raise ImportError("sgl_kernel_ext: the op is registered but the _C module was not loaded by this package")
    if _module.MAX_N != MAX_N:
        raise ImportError(f"sgl_kernel_ext._C was built for MAX_N = {_module.MAX_N}, copy.cu says {MAX_N}: rebuild it")
    return _module


def _copy_list_through_tensor(values):
    """sglang's caller as it is without this package, with this package's op."""
    tensor_cpu = torch.tensor(values, dtype=torch.int32, device="cpu")
    tensor_gpu = torch.empty_like(tensor_cpu, device="cuda")
    copy_to_gpu_no_ce(tensor_cpu, tensor_gpu)
    return tensor_gpu


_copy_list_through_tensor.__name__ = "copy_list_to_gpu_no_ce"


def list_entry_point():
    """``copy_list_to_gpu_no_ce`` as a C type (loads the extension): callers on a hot
    path bind this once and call it with no Python frame between."""
    return list_copier(_copy_list_through_tensor)


def copy_list_to_gpu_no_ce(values: list[int]) -> torch.Tensor:
    """What sglang's caller computes: ``torch.tensor(values, dtype=torch.int32)`` as a
    new int32 tensor on the current CUDA device, in one by-value kernel launch for an
    exact list or tuple of 1..MAX_N ints in int32; any other input takes the CPU tensor
    and the op, with stock's answer or error."""
    return list_entry_point()(values)
