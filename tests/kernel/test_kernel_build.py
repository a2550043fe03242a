"""CI (no GPU): the shipped sgl_kernel_ext wheel, built against this venv's torch
(2.14.1, C++20), as a user gets it.

The wheel dist/ ships: scripts/build_kernel_wheel.sh builds it once, from a copy of
sgl_kernel_ext/ with `pip wheel --no-build-isolation` and no TORCH_CUDA_ARCH_LIST, i.e. for
the release architectures (nvcc compiles the series' post-image copy.cu, the host compiler
registration.cc), and `make test-kernel` passes that build here (run alone, the fixture
runs the script). Then checks what came out: every architecture's machine code holds the
exact kernels for 16/32/64/72 and the one fallback kernel, none spilling; the library holds
SASS for exactly the architectures sglang-kernel 0.4.10 ships plus compute_80 PTX (read with
cuobjdump); the ops' functions are defined and only the limited API is imported;
the wheel is cp310-abi3 and requires this torch; it loads, registers the ops with
their schemas and exposes the list entry point under Python 3.11 (this venv) and
3.12 (.venvs/kernel-py312); it carries the sglang plugin entry point and the
unchanged sources. Fails, not skips, when nvcc is missing: this is the CI build
check. No stubs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import kernel_patch as kp
import pytest

BUILD_SCRIPT = kp.REPO_ROOT / "scripts" / "build_kernel_wheel.sh"


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory):
    """The wheel and its build log (scripts/build_kernel_wheel.sh). `make test-kernel` passes the
    build it made for dist/ in SGL_KERNEL_EXT_WHEEL_BUILD; run alone, this builds one."""
    work = tmp_path_factory.mktemp("ext")
    out = os.environ.get("SGL_KERNEL_EXT_WHEEL_BUILD")
    if out:
        out = Path(out)
    else:
        assert shutil.which("nvcc"), "nvcc is not on PATH: the CI build check needs CUDA's compiler"
        out = work / "build"
        env = dict(os.environ)
        env.pop("TORCH_CUDA_ARCH_LIST", None)  # the release architectures
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), sys.executable, str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
        assert proc.returncode == 0, f"extension build failed:\n{proc.stdout[-2000:]}{proc.stderr[-12000:]}"
    wheels = list(out.glob("sgl_kernel_ext-*.whl"))
    assert len(wheels) == 1, (out, wheels)
    with zipfile.ZipFile(wheels[0]) as whl:
        for name in ("copy.cu", "registration.cc"):
            built = whl.read(f"sgl_kernel_ext/_csrc/{name}")
            assert built == (kp.EXT_DIR / "csrc" / name).read_bytes(), f"{wheels[0]} is not built from csrc/{name}"
    return {"log": (out / "build.log").read_text(), "wheel": wheels[0], "work": work}


def _cuobjdump() -> str:
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    import importlib.util

    spec = importlib.util.find_spec("triton")  # triton's wheel carries one
    assert spec and spec.submodule_search_locations, "cuobjdump is needed (CUDA toolkit or triton)"
    path = os.path.join(spec.submodule_search_locations[0], "backends", "nvidia", "bin", "cuobjdump")
    assert os.path.exists(path), path
    return path


def _library(wheel_build):
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        (name,) = [n for n in whl.namelist() if re.match(r"sgl_kernel_ext/_C.*\.so$", n)]
        path = wheel_build["work"] / "lib.so"
        path.write_bytes(whl.read(name))
    return path


def _resource_usage(wheel_build) -> dict[str, dict[str, dict[str, int]]]:
    """cuobjdump -res-usage of the library: machine-code arch -> kernel -> resource -> value."""
    res = subprocess.run(
        [_cuobjdump(), "-res-usage", str(_library(wheel_build))], capture_output=True, text=True, check=True
    ).stdout
    usage: dict[str, dict[str, dict[str, int]]] = {}
    arch = kernel = None
    for line in res.splitlines():
        if line.startswith("arch = "):
            arch = line.split("=", 1)[1].strip()
        elif line.startswith(" Function "):
            kernel = line.split()[1].rstrip(":")
        elif kernel and line.startswith("  REG:"):
            usage.setdefault(arch, {})[kernel] = {k: int(v) for k, v in re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line)}
            kernel = None
    return usage


def test_exact_and_fallback_kernels_without_spills(wheel_build):
    # every architecture's machine code: the exact kernels for 16/32/64/72 and the one fallback
    # kernel, none with a stack frame or local memory (where ptxas would put spilled registers)
    usage = _resource_usage(wheel_build)
    want = {f"_Z24copy_to_gpu_no_ce_kernelILi{n}EEv10InputArrayIXT_EEPi" for n in (16, 32, 64, 72)}
    want.add("_Z33copy_to_gpu_no_ce_fallback_kernel10InputArrayILi512EEiPi")
    assert "sm_90" in usage, usage.keys()
    for arch, kernels in usage.items():
        assert {k for k in kernels if "copy_to_gpu_no_ce" in k} == want, (arch, kernels.keys())
        for kernel in want:
            assert kernels[kernel]["STACK"] == kernels[kernel]["LOCAL"] == 0, (arch, kernel, kernels[kernel])


def test_built_with_the_cxx_standard_torch_needs(wheel_build):
    # torch 2.14.1's ATen headers need C++20; torch.utils.cpp_extension adds it itself
    # (sgl_kernel_ext forces no -std, so older torch builds keep their own default).
    import torch

    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    nvcc_lines = [ln for ln in wheel_build["log"].splitlines() if "nvcc" in ln and "copy.cu" in ln and " -c " in ln]
    assert nvcc_lines, "no nvcc command for copy.cu in the build log"
    if (major, minor) >= (2, 12):
        assert all("-std=c++20" in ln for ln in nvcc_lines), nvcc_lines[0]


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
    # torch's own error translation and CUDA initialisation, as torch's bindings use them
    assert "torch::translate_exception_to_python(std::__exception_ptr::exception_ptr const&)" in undefined
    assert "torch::utils::device_lazy_init(c10::DeviceType)" in undefined
    assert "PyList_GetItem" in undefined  # the list entry point reads items through the API function
    # Py_LIMITED_API on every compile command: the compiler itself refuses what is outside the limited API.
    compiles = [ln for ln in wheel_build["log"].splitlines() if " -c " in ln and re.search(r"\.(cc|cu)\b", ln)]
    assert all(any(f in ln for ln in compiles) for f in ("registration.cc", "copy.cu")), compiles
    assert all("-DPy_LIMITED_API=0x030A0000" in ln for ln in compiles), compiles


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


# sglang-kernel 0.4.10 (sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl),
# sgl_kernel/sm90/common_ops.abi3.so and sm100/: `cuobjdump --list-elf` names these cubins
# (no PTX), and `cuobjdump -res-usage` shows copy_to_gpu_no_ce_kernel in each, the sm_100
# one as `arch = sm_100f` (the sm_100 family).
SGLANG_KERNEL_0_4_10_ELF = {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120a"}
SGLANG_KERNEL_0_4_10_ARCH = {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"}


def test_machine_code_for_the_architectures_sglang_kernel_ships(wheel_build):
    lib = str(_library(wheel_build))
    exe = _cuobjdump()
    elf = subprocess.run([exe, "--list-elf", lib], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([exe, "--list-ptx", lib], capture_output=True, text=True, check=True).stdout
    assert set(re.findall(r"\.(sm_\w+)\.cubin", elf)) == SGLANG_KERNEL_0_4_10_ELF, elf
    assert set(re.findall(r"\.(sm_\w+)\.ptx", ptx)) == {"sm_80"}, ptx
    res = subprocess.run([exe, "-res-usage", lib], capture_output=True, text=True, check=True).stdout
    arch = None
    with_kernel = set()
    for line in res.splitlines():
        if line.startswith("arch = "):
            arch = line.split("=", 1)[1].strip()
        elif "copy_to_gpu_no_ce_fallback_kernel" in line:
            with_kernel.add(arch)
    assert with_kernel == SGLANG_KERNEL_0_4_10_ARCH, res[:3000]


LOAD_PROBE = """
import json, sys, torch
import sgl_kernel_ext
how = sgl_kernel_ext.ensure_loaded()
ops = {n: str(getattr(torch.ops.sgl_kernel_ext, n).default._schema)
       for n in ("copy_to_gpu_no_ce", "copy_list_to_gpu_no_ce", "copy_to_gpu_no_ce_fallback")}
copier = sgl_kernel_ext.list_entry_point()
print(json.dumps({"python": sys.version_info[:2], "how": how, "so": sgl_kernel_ext._C.__file__, "ops": ops,
                  "list": [type(copier).__name__, copier.__module__], "max_n": sgl_kernel_ext._C.MAX_N}))
"""


@pytest.mark.parametrize("venv", [".venvs/sglang", ".venvs/kernel-py312"])
def test_wheel_loads_and_registers_under_python(wheel_build, tmp_path, venv):
    import json

    python = kp.REPO_ROOT / venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{venv} is not built (scripts/setup_venvs.sh)")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        whl.extractall(site)
    proc = subprocess.run(
        [str(python), "-c", LOAD_PROBE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["how"] == "prebuilt" and out["so"].endswith("_C.abi3.so"), out
    # the C type the plugin installs, and copy.cu's bound as the build passed it
    assert out["list"] == ["type", "sgl_kernel_ext._C"] and out["max_n"] == 512
    assert out["ops"] == {
        "copy_to_gpu_no_ce": "sgl_kernel_ext::copy_to_gpu_no_ce(Tensor input, Tensor($0! -> ) output) -> ()",
        "copy_list_to_gpu_no_ce": "sgl_kernel_ext::copy_list_to_gpu_no_ce(int[] values) -> Tensor",
        "copy_to_gpu_no_ce_fallback": "sgl_kernel_ext::copy_to_gpu_no_ce_fallback(Tensor input, Tensor($0! -> ) output) -> ()",
    }
    assert tuple(out["python"]) == ((3, 11) if venv.endswith("sglang") else (3, 12))


def _symbol_versions(path, prefix: str) -> list[tuple[int, ...]]:
    out = subprocess.run(
        [shutil.which("objdump") or "objdump", "-T", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(rf"\b{prefix}_([0-9.]+[0-9])\b", out)})


def test_needs_no_newer_libstdcxx_than_torch(wheel_build):
    # The pitfall in the README (a newer GCC's headers against an older libstdc++ at run
    # time) cannot reach users if the extension asks libstdc++ for nothing newer than
    # torch's own libraries do: wherever torch loads, so does the extension.
    import torch

    lib = _library(wheel_build)
    torch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    for prefix in ("GLIBCXX", "CXXABI"):
        ours, theirs = _symbol_versions(lib, prefix), _symbol_versions(torch_cpu, prefix)
        assert ours and theirs and max(ours) <= max(theirs), (prefix, max(ours), max(theirs))


# The cases the one-launch path reads itself (exact list/tuple of 1..512 ints in int32);
# every other input goes to the caller it stands in front of.
READ_BY_THE_EXTENSION = {
    "list_1",
    "list_16",
    "list_17_negative",
    "list_72_counts",
    "list_512_full_range",
    "list_int32_bounds",
    "tuple_32",
}


def test_list_entry_points_answer_as_stock_without_a_gpu(wheel_build, tmp_path):
    # The argument reading and the refusals of the list entry points, on this CPU
    # machine (tests/kernel/probe_list_inputs.py): the values the extension reads are
    # stock's, it reads nothing stock refuses, and each entry point's outcome (torch's
    # CUDA initialisation error for what stock accepts, stock's own error for the rest)
    # is the caller's it stands for. The GPU run compares the copied values too.
    import json

    python = kp.REPO_ROOT / ".venvs" / "sglang" / "bin" / "python"
    if not python.exists():
        pytest.skip(".venvs/sglang is not built (scripts/setup_venvs.sh)")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel_build["wheel"]) as whl:
        whl.extractall(site)
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [str(python), os.path.join(here, "probe_list_inputs.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), here]), "CUDA_VISIBLE_DEVICES": ""},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rows, summary = out["rows"], out["summary"]
    assert out["cuda"] is False
    read = {case for case, row in rows.items() if row["read"]["got"][0] == "ok-cpu"}
    assert read == READ_BY_THE_EXTENSION, read
    assert summary["read"]["wrong_value"] == 0 and summary["read"]["accepts_refused"] == 0, summary["read"]
    for name in ("wrapper", "no_ce_caller", "pinned_caller"):
        assert summary[name]["same"] == summary[name]["cases"] == len(rows), (name, summary[name])
    assert all(s["system_error"] == 0 for s in summary.values()), summary
