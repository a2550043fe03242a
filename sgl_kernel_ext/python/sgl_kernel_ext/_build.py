"""Build preparation shared by setup.py and load_jit()."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

_MAX_N = re.compile(rb"^constexpr int kCopyToGpuNoCeMaxN = (\d+);$", re.M)


def copy_max_n(copy_cu: Path) -> int:
    """copy.cu's kCopyToGpuNoCeMaxN: the one source of the length bound."""
    found = _MAX_N.findall(Path(copy_cu).read_bytes())
    if len(found) != 1:
        raise ValueError(f"{copy_cu}: expected one `constexpr int kCopyToGpuNoCeMaxN = <n>;` line, found {len(found)}")
    return int(found[0])


# Machine code built when TORCH_CUDA_ARCH_LIST is unset and no GPU is visible (a
# CPU-only build machine, i.e. the wheel that is shipped): the architectures
# sglang-kernel 0.4.10 has SASS of copy_to_gpu_no_ce for (cuobjdump of its
# common_ops.abi3.so: sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a), plus
# compute_80 PTX, which the driver compiles for any other GPU of capability >= 8.0.
# The kernels use nothing newer than sm_80, so sm_89 and sm_90 machine code come from
# the compute_80 front end too: four front-end passes over copy.cu (the expensive part:
# torch's headers) instead of six. sm_100f (the sm_100 family) needs nvcc >= 12.9.
RELEASE_GENCODES = (
    ("compute_80", "sm_80"),
    ("compute_80", "sm_89"),
    ("compute_80", "sm_90"),
    ("compute_90a", "sm_90a"),
    ("compute_100f", "sm_100f"),
    ("compute_120a", "sm_120a"),
    ("compute_80", "compute_80"),
)


def release_gencode_flags() -> list[str]:
    # --threads: nvcc compiles the architectures in parallel
    return [f"-gencode=arch={arch},code={code}" for arch, code in RELEASE_GENCODES] + ["--threads=2"]


def prepare(copy_cu: Path | None = None) -> tuple[list[str], list[str], list[str]]:
    """(cxx flags, nvcc flags, include dirs), after pointing torch.utils.cpp_extension
    at the CUDA toolkit of find_cuda_home(). Architectures: RELEASE_GENCODES with
    SGL_KERNEL_EXT_ARCHS=release, else TORCH_CUDA_ARCH_LIST if set, else the visible
    GPUs (torch's default), else RELEASE_GENCODES. With copy_cu, the host compiler gets
    its length bound as SGL_KERNEL_EXT_MAX_N (registration.cc).

    No -std flag: torch.utils.cpp_extension adds the standard the installed torch
    was built with (-std=c++20 for torch 2.14.1, whose headers need it; -std=c++17
    for torch 2.11).
    """
    import torch
    import torch.utils.cpp_extension as cpp_extension

    cuda_home = find_cuda_home()
    if cuda_home and cpp_extension.CUDA_HOME != cuda_home:
        # torch took its guess at import; its build functions read this module global,
        # so the process environment stays as the user set it.
        cpp_extension.CUDA_HOME = cuda_home
    nvcc = ["-O3"]
    release = os.environ.get("SGL_KERNEL_EXT_ARCHS") == "release"  # also where a GPU is visible
    if release or (not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available()):
        # explicit -gencode flags: torch then adds none of its own
        nvcc += release_gencode_flags()
    cxx = ["-O3"] + ([f"-DSGL_KERNEL_EXT_MAX_N={copy_max_n(copy_cu)}"] if copy_cu else [])
    return cxx, nvcc, extra_include_dirs(cpp_extension.CUDA_HOME)


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
