"""CI (no GPU): the extension builds against this venv's torch (2.14.1, C++20).

Builds a wheel of sgl_kernel_ext/ from a copy of it with
`pip wheel --no-build-isolation` (nvcc compiles the patch's post-image copy.cu,
the host compiler registration.cc, for TORCH_CUDA_ARCH_LIST=9.0+PTX), then
checks what came out: ptxas compiled the exact kernels for 16/32/64/72 and the
one fallback kernel without spills; the shared library defines the ops'
functions; the wheel carries the sglang plugin entry point and the unchanged
sources. Fails, not skips, when nvcc is missing: this is the CI build check.
No stubs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import kernel_patch as kp


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory):
    assert shutil.which("nvcc"), "nvcc is not on PATH: the CI build check needs CUDA's compiler"
    work = tmp_path_factory.mktemp("ext")
    src = work / "sgl_kernel_ext"
    shutil.copytree(kp.EXT_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    env = dict(os.environ)
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    env["NVCC_APPEND_FLAGS"] = (env.get("NVCC_APPEND_FLAGS", "") + " -Xptxas=-v").strip()
    env.setdefault("MAX_JOBS", str(max(1, min(4, os.cpu_count() or 1))))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(work / "dist"),
         str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    log = proc.stdout + proc.stderr
    (work / "build.log").write_text(log)
    assert proc.returncode == 0, f"extension build failed:\n{log[-12000:]}"
    wheels = list((work / "dist").glob("sgl_kernel_ext-*.whl"))
    assert len(wheels) == 1, wheels
    return {"log": log, "wheel": wheels[0], "work": work}


def test_ptxas_compiled_exact_and_fallback_kernels(wheel_build):
    log = wheel_build["log"]
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_90'", log)
    assert "_Z33copy_to_gpu_no_ce_fallback_kernel10InputArrayILi512EEiPi" in entries, entries
    for n in (16, 32, 64, 72):
        assert f"_Z24copy_to_gpu_no_ce_kernelILi{n}EEv10InputArrayIXT_EEPi" in entries, entries
    assert len([e for e in entries if "copy_to_gpu_no_ce" in e]) == 5, entries
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), spills


def test_built_with_the_cxx_standard_torch_needs(wheel_build):
    # torch 2.14.1's ATen headers need C++20; torch.utils.cpp_extension adds it itself
    # (sgl_kernel_ext forces no -std, so older torch builds keep their own default).
    import torch

    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    nvcc_lines = [l for l in wheel_build["log"].splitlines() if "nvcc" in l and "copy.cu" in l and " -c " in l]
    assert nvcc_lines, "no nvcc command for copy.cu in the build log"
    if (major, minor) >= (2, 12):
        assert all("-std=c++20" in l for l in nvcc_lines), nvcc_lines[0]


def test_shared_library_defines_the_ops(wheel_build):
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        names = whl.namelist()
        so = [n for n in names if re.match(r"sgl_kernel_ext/_C.*\.so$", n)]
        assert len(so) == 1, names
        path = wheel_build["work"] / "C.so"
        path.write_bytes(whl.read(so[0]))
    nm = shutil.which("nm")
    assert nm, "binutils nm is needed"
    out = subprocess.run([nm, "-D", "-C", "--defined-only", str(path)], capture_output=True, text=True).stdout
    assert "copy_to_gpu_no_ce(at::Tensor const&, at::Tensor&)" in out
    assert "copy_to_gpu_no_ce_fallback_impl(at::Tensor const&, at::Tensor&)" in out
    assert "copy_list_to_gpu_no_ce(c10::ArrayRef<long>)" in out
    assert "PyInit__C" in out
    # Python's limited API only (cp310-abi3), plus libtorch_python's THPVariable_Wrap
    undefined = subprocess.run([nm, "-D", "-C", "--undefined-only", str(path)], capture_output=True, text=True).stdout
    assert "THPVariable_Wrap(at::TensorBase const&)" in undefined
    assert "PyList_GetItem" in undefined and "PyList_GET_ITEM" not in undefined


def test_wheel_is_abi3_and_pins_the_build_torch(wheel_build):
    import torch

    assert wheel_build["wheel"].name.endswith("-cp310-abi3-linux_x86_64.whl"), wheel_build["wheel"].name
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        tags = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/WHEEL"))).decode()
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in meta.splitlines()
    assert "Tag: cp310-abi3-linux_x86_64" in tags.splitlines()


def test_wheel_carries_plugin_and_unchanged_sources(wheel_build):
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        names = whl.namelist()
        ep = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = whl.read(ep).decode()
        copy_cu = whl.read("sgl_kernel_ext/_csrc/copy.cu")
    assert "[sglang.srt.plugins]" in entry_points
    assert "sgl_kernel_ext.sglang_plugin:register" in entry_points
    assert copy_cu == kp.image("new", kp.COPY_CU)
