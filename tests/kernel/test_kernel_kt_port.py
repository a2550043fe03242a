"""The port of sgl-kernel 0001 to the KT fork's own sgl-kernel (target sgl-kernel-kt, kvcache-ai/sglang):
its pre-image is the fork's copy.cu with kernels for N = 64 and 72 only, its post-image is the copy.cu
sgl-kernel 0001 gives upstream (so the GPU tests of the post-image cover the fork's kernel code too), and
nvcc compiles it against this venv's torch with the exact kernels for 16/32/64/72 and the one fallback.

Reads the laid-out trees (`sgl-overlay fetch && sgl-overlay apply`). The compile is one architecture
(sm_90), one object file: 1-4 min on two cores, most of it torch's headers. No stubs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import kernel_patch as kp

from helpers import REPO_ROOT, tree_dir

MANIFEST = kp.load_manifest(REPO_ROOT / "patches")
TARGET = MANIFEST.get("sgl-kernel-kt")
COPY_CU = "sgl-kernel/csrc/elementwise/copy.cu"
ENTRIES = {n: f"_Z24copy_to_gpu_no_ce_kernelILi{n}EEv10InputArrayIXT_EEPi" for n in (16, 32, 64, 72)}
FALLBACK = "_Z33copy_to_gpu_no_ce_fallback_kernel10InputArrayILi512EEiPi"


def _show(target: str, rev: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(tree_dir(target)), "show", f"{rev}:{path}"], capture_output=True, check=True
    ).stdout


def test_preimages_are_the_forks_and_the_buggy_kernel():
    for path, blob in TARGET.preimages.items():
        found = subprocess.run(
            ["git", "-C", str(tree_dir("sgl-kernel-kt")), "rev-parse", f"upstream:{path}"],
            capture_output=True,
            text=True,
        )
        assert found.stdout.strip() == blob, path
    old = _show("sgl-kernel-kt", "upstream", COPY_CU).decode()
    assert re.findall(r"if \(N == (\d+)\)", old) == ["72", "64"] and 'TORCH_CHECK(false, "unexpected N");' in old


def test_post_image_is_what_sgl_kernel_0001_gives_upstream():
    """The fork's copy.cu after the port is byte for byte upstream's after sgl-kernel 0001, and the test file is upstream's after 0001 with the fork's own `__main__` tail."""
    first = "HEAD"  # sgl-kernel's tree after its 0001, the one patch of its series
    assert MANIFEST.get("sgl-kernel").patches == TARGET.patches
    assert _show("sgl-kernel-kt", "HEAD", COPY_CU) == _show("sgl-kernel", first, COPY_CU)
    test = "sgl-kernel/tests/test_copy.py"
    ours, theirs = _show("sgl-kernel-kt", "HEAD", test).decode(), _show("sgl-kernel", first, test).decode()
    assert ours == theirs.replace("import sys\n\n", "", 1).replace(
        "sys.exit(pytest.main([__file__]))", "pytest.main([__file__])"
    )
    assert ours.endswith('if __name__ == "__main__":\n    pytest.main([__file__])\n')


def _nvcc_flags() -> list[str]:
    """What torch.utils.cpp_extension gives nvcc for this torch (includes, ABI, C++ standard)."""
    import torch
    import torch.utils.cpp_extension as cpp_extension
    from copy_ext import extra_include_dirs, find_cuda_home

    includes = cpp_extension.include_paths(device_type="cuda") + extra_include_dirs(find_cuda_home())
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    std = "-std=c++20" if tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 10) else "-std=c++17"
    return [*(f"-I{d}" for d in includes), abi, std, *cpp_extension.COMMON_NVCC_FLAGS, "-Xcompiler", "-fPIC"]


def test_nvcc_compiles_the_post_image(tmp_path: Path):
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is not on PATH: the CI build check needs CUDA's compiler"
    source = tmp_path / "copy.cu"
    source.write_bytes(_show("sgl-kernel-kt", "HEAD", COPY_CU))
    cmd = [nvcc, "-c", str(source), "-o", str(tmp_path / "copy.o"), "-O3", "-gencode=arch=compute_90,code=sm_90"]
    proc = subprocess.run([*cmd, "-Xptxas=-v", *_nvcc_flags()], capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-8000:]
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_90'", log)
    assert sorted(entries) == sorted([*ENTRIES.values(), FALLBACK]), entries
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), spills
    symbols = subprocess.run(["nm", "-C", "--defined-only", str(tmp_path / "copy.o")], capture_output=True, text=True)
    assert "copy_to_gpu_no_ce(at::Tensor const&, at::Tensor&)" in symbols.stdout
