"""Build sgl_kernel_ext._C from csrc/ (copy.cu unchanged + registration.cc).

The sources are also copied into the package (sgl_kernel_ext/_csrc) so that an
installed copy can rebuild itself on the fly with sgl_kernel_ext.load_jit().
"""

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
    sys.path.insert(0, str(HERE / "python"))
    from sgl_kernel_ext._build import prepare

    cxx, nvcc, include_dirs = prepare()
    from torch.utils.cpp_extension import CUDAExtension

    return [
        CUDAExtension(
            name="sgl_kernel_ext._C",
            sources=[str(Path("csrc") / name) for name in SOURCES],
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        )
    ]


def cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_py": BuildPyWithSources, "build_ext": BuildExtension}


setup(ext_modules=ext_modules(), cmdclass=cmdclass())
