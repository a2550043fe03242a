"""Build sgl_kernel_ext._C from csrc/ (copy.cu unchanged + registration.cc).

Like sgl-kernel, one cp310-abi3 wheel serves every CPython >= 3.10: the module
uses Python's limited API only (registration.cc), plus three functions of
libtorch_python (THPVariable_Wrap, translate_exception_to_python, device_lazy_init),
linked by name. SGL_KERNEL_EXT_LIMITED_API=0 builds for the running Python only (a
cpXY wheel), where the list entry point reads the list's items in place (Python >= 3.12). The wheel requires the torch
it was built against (``torch==<version>``): the extension uses torch's C++ ABI.

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
LIMITED_API = ("cp310", "0x030A0000")  # wheel tag, Py_LIMITED_API
USE_LIMITED_API = os.environ.get("SGL_KERNEL_EXT_LIMITED_API", "1") != "0"


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

    cxx, nvcc, include_dirs = prepare(CSRC / "copy.cu")
    from torch.utils.cpp_extension import CUDAExtension

    return [
        CUDAExtension(
            name="sgl_kernel_ext._C",
            sources=[str(Path("csrc") / name) for name in SOURCES],
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx, "nvcc": nvcc},
            define_macros=[("Py_LIMITED_API", LIMITED_API[1])] if USE_LIMITED_API else [],
            py_limited_api=USE_LIMITED_API,
            libraries=["torch_python"],  # left out by torch for py_limited_api: THPVariable_Wrap and the others
        )
    ]


def torch_requirement() -> str:
    import torch

    return f"torch=={torch.__version__.split('+')[0]}"


def cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_py": BuildPyWithSources, "build_ext": BuildExtension}


setup(
    ext_modules=ext_modules(),
    cmdclass=cmdclass(),
    install_requires=[torch_requirement()],
    options={"bdist_wheel": {"py_limited_api": LIMITED_API[0]}} if USE_LIMITED_API else {},
)
