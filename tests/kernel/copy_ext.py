"""Test-only torch extension builds of a copy.cu (sgl-kernel's copy_to_gpu_no_ce).

Each build compiles one copy.cu, byte for byte as given (a pre-image or the series'
post-image, read from build/trees), beside a registration that declares the op with
sgl-kernel's own schema and CUDA dispatch key (sgl-kernel/csrc/common_extension.cc)
under its own namespace: torch.ops.copy_<name>.copy_to_gpu_no_ce. -Bsymbolic makes
each library call its own copy_to_gpu_no_ce, so several images load into one process.
Used on the device machine by the GPU tests and benchmarks/caller_bench.py; CI compiles
the post-image alone with nvcc (test_kernel_build.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

REGISTRATION = """#include <ATen/core/Tensor.h>
#include <torch/library.h>

// Defined in copy.cu.
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);

TORCH_LIBRARY(copy_{name}, m) {{
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
}}
"""


# The KT fork's copy.cu (kvcache-ai/sglang 04653fa8; kt-kernel's bundled sgl-kernel is built from it) is
# sgl-kernel's pre-image without its N = 32 kernel, which its git blob id proves.
KT_COPY_CU_BLOB = "09719f5107015c2dc7730f61632c5b955de16294"
_N_32_BRANCH = b"  } else if (N == 32) {\n    copy_to_gpu_no_ce_impl<32>(input, output);\n"


def kt_copy_cu(stock_copy_cu: bytes) -> bytes:
    """The KT fork's copy.cu (kernels for N = 64 and 72 only) from sgl-kernel's pre-image."""
    kt = stock_copy_cu.replace(_N_32_BRANCH, b"")
    blob = hashlib.sha1(b"blob %d\0" % len(kt) + kt).hexdigest()
    if blob != KT_COPY_CU_BLOB:
        raise ValueError(f"the KT fork's copy.cu would be blob {blob}, not {KT_COPY_CU_BLOB}")
    return kt


def write_sources(name: str, copy_cu: bytes, build_dir: Path) -> list[Path]:
    """copy_cu as given and its registration, under build_dir/name."""
    work = Path(build_dir) / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "copy.cu").write_bytes(copy_cu)
    (work / "registration.cc").write_text(REGISTRATION.format(name=name))
    return [work / "copy.cu", work / "registration.cc"]


def build(name: str, copy_cu: bytes, build_dir: Path):
    """Compile and load copy_cu as torch.ops.copy_<name>; returns its copy_to_gpu_no_ce."""
    import torch
    import torch.utils.cpp_extension as cpp_extension

    cuda_home = find_cuda_home()
    if cuda_home:
        cpp_extension.CUDA_HOME = cuda_home
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    sources = write_sources(name, copy_cu, build_dir)
    cpp_extension.load(
        name=f"copy_{name}",
        sources=[str(s) for s in sources],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3"],
        extra_ldflags=["-Wl,-Bsymbolic"],
        extra_include_paths=extra_include_dirs(cuda_home),
        build_directory=str(sources[0].parent),
        is_python_module=False,
    )
    return getattr(torch.ops, f"copy_{name}").copy_to_gpu_no_ce


def as_sgl_kernel(op):
    """sgl_kernel.elementwise.copy_to_gpu_no_ce as sgl-kernel's Python wrapper defines it."""

    def copy_to_gpu_no_ce(input, output):
        op(input, output)

    return copy_to_gpu_no_ce


def extra_include_dirs(cuda_home: str | None = None) -> list[str]:
    """CUDA library headers that ATen/cuda/CUDAContext.h needs (cusparse.h, cublas_v2.h).

    A full CUDA toolkit has them under $CUDA_HOME/include; a minimal one (nvcc
    only) does not, but torch's CUDA wheels pull in nvidia-* wheels that ship
    them (nvidia/cu13/include for CUDA 13, nvidia/<lib>/include for CUDA 12).
    """
    dirs: list[str] = []
    if cuda_home is None:
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if (Path(cuda_home) / "include" / "cusparse.h").is_file():
        return dirs
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return dirs
    for root in spec.submodule_search_locations:
        for header in ("cusparse.h", "cublas_v2.h", "cusolverDn.h"):
            for found in sorted(Path(root).glob(f"*/include/{header}")):
                inc = str(found.parent)
                if inc not in dirs:
                    dirs.append(inc)
    return dirs


def find_cuda_home() -> str | None:
    """The CUDA toolkit to build with: $CUDA_HOME or $CUDA_PATH when set, else the
    toolkit `nvcc` on PATH resolves to, else /usr/local/cuda (None if neither has
    include/cuda_runtime.h and bin/nvcc).

    torch.utils.cpp_extension takes CUDA_HOME from the environment, else two levels
    above `which nvcc`. Where nvcc on PATH is a wrapper script (e.g. /usr/local/bin/nvcc
    exec-ing /usr/local/cuda-13.0/bin/nvcc) that gives /usr/local, which has no
    libcudart to link.
    """
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(os.path.realpath(nvcc)).parents[1])
    candidates.append(Path("/usr/local/cuda"))
    for cand in candidates:
        if (cand / "include" / "cuda_runtime.h").is_file() and (cand / "bin" / "nvcc").is_file():
            return str(cand)
    return None
