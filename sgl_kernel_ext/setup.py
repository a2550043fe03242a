"""Build sgl_kernel_ext._C from csrc/ (copy.cu unchanged + registration.cc).

The sources are also copied into the package (sgl_kernel_ext/_csrc) so that an
installed copy can rebuild itself on the fly with sgl_kernel_ext.load_jit().
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
SOURCES = ["copy.cu", "registration.cc"]


class BuildPyWithSources(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "sgl_kernel_ext" / "_csrc"
        dest.mkdir(parents=True, exist_ok=True)
        for name in SOURCES:
            shutil.copyfile(CSRC / name, dest / name)


def ext_modules():
    if os.environ.get("SGL_KERNEL_EXT_SKIP_BUILD") == "1":
        return []
    sys.path.insert(0, str(HERE / "python"))
    from sgl_kernel_ext._build import compile_flags, default_arch_list, ensure_cuda_home, extra_include_dirs

    ensure_cuda_home()
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, CUDAExtension

    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = default_arch_list()
    cxx, nvcc = compile_flags()
    return [
        CUDAExtension(
            name="sgl_kernel_ext._C",
            sources=[str(Path("csrc") / name) for name in SOURCES],
            include_dirs=extra_include_dirs(CUDA_HOME),
            extra_compile_args={"cxx": cxx, "nvcc": nvcc},
            # e.g. -static-libstdc++ where the host toolchain's libstdc++ differs from the process's
            extra_link_args=os.environ.get("SGL_KERNEL_EXT_LDFLAGS", "").split(),
        )
    ]


def cmdclass():
    classes = {"build_py": BuildPyWithSources}
    if os.environ.get("SGL_KERNEL_EXT_SKIP_BUILD") != "1":
        from torch.utils.cpp_extension import BuildExtension

        classes["build_ext"] = BuildExtension
    return classes


setup(ext_modules=ext_modules(), cmdclass=cmdclass())
