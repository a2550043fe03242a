"""doctor on the real test venvs says which route the kernel fix takes there and what that route lacks:
.venvs/sglang (sglang 0.5.23 has sglang.srt.plugins) and .venvs/sglang-kt (kt-kernel's bundled sgl_kernel;
sglang-kt 0.7.2 has no plugin system), each with the stock or patched install of build/installed
(scripts/install_wheels.sh) and, on PYTHONPATH, the sgl_kernel_ext wheel of dist/ installed with --target."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT as REPO
from sgl_overlay.manifest import load_manifest

MANIFEST = load_manifest(REPO / "patches")
INSTALLED = REPO / "build" / "installed"
VENVS = {
    "sglang": REPO / ".venvs" / "sglang" / "bin" / "python",
    "sglang-kt": REPO / ".venvs" / "sglang-kt" / "bin" / "python",
}
EXT = "sgl-kernel-ext installed (copy_to_gpu_no_ce for any N <= 512)"
RUNNER = "wired into the DeepGEMM runner (sglang/srt/layers/moe/moe_runner/deep_gemm.py) by sglang-kt's runner patch"
PLUGIN = "wired into sglang through a sglang.srt.plugins entry point"


def _facts(python: Path) -> dict:
    """What the venv holds, read with its own interpreter: torch's version, and kt-kernel's when installed."""
    if not python.is_file():
        pytest.fail(f"{python} missing: run `make venvs`")
    probe = (
        "import importlib.metadata as md, json\n"
        "v = {}\n"
        "for n in ('torch', 'kt-kernel'):\n"
        "    try: v[n] = md.version(n)\n"
        "    except md.PackageNotFoundError: pass\n"
        "print(json.dumps(v))"
    )
    return json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout)


def _site(target: str, kind: str) -> Path:
    index = INSTALLED / "index.json"
    if not index.is_file():
        pytest.fail(f"{index} missing: run `make test-wheels` (it builds and installs the wheels)")
    first = MANIFEST.get(target).wheels[0].file
    entry = next(e for e in json.loads(index.read_text()) if e["stock"] == first)
    return REPO / entry[f"{kind}_dir"]


def _torch_pin(site: Path, dist: str) -> str:
    """The distribution's unconditional torch requirement, as its METADATA writes it."""
    (info,) = site.glob(f"{dist.replace('-', '_')}-*.dist-info")
    text = (info / "METADATA").read_text()
    (pin,) = re.findall(r"^Requires-Dist: torch ?([=<>!~][^;\n]*)$", text, re.M)
    return pin.strip()


@pytest.fixture(scope="module")
def ext_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = sorted((REPO / "dist").glob("sgl_kernel_ext-*.whl"))
    if len(found) != 1:
        pytest.fail(
            f"want one sgl_kernel_ext wheel in {REPO / 'dist'}, found {[p.name for p in found]}: run `make wheels`"
        )
    site = tmp_path_factory.mktemp("ext") / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target"]
    subprocess.run([*pip, str(site), str(found[0])], check=True)
    return site


def _doctor(target: str, kind: str, ext: Path | None = None) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGL_OVERLAY_PATCHES")}
    if ext is not None:
        env["PYTHONPATH"] = str(ext)
    cmd = [sys.executable, "-m", "sgl_overlay", "--patches", str(REPO / "patches"), "doctor", "--no-live"]
    cmd += ["--python", str(VENVS[target]), "--site", str(_site(target, kind)), "--dist", str(REPO / "dist")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def _state(lines: list[str], what: str) -> str:
    """ok or MISSING for the one finding that starts with `what`."""
    (found,) = [line for line in lines if line.strip().split("] ", 1)[-1].startswith(f"sgl-kernel: {what}")]
    return found.strip()[1:].split("]")[0]


def _kt_route(version: str) -> str:
    torch = _facts(VENVS["sglang-kt"])["torch"]
    pin = _torch_pin(_site("sglang-kt", "stock"), "sglang-kt")
    return (
        f"route: sglang-kt {version} has no sglang.srt.plugins: its DeepGEMM runner calls sgl_kernel_ext once its "
        f"runner patch is in (torch {torch}, sglang-kt pins torch{pin})"
    )


def _kt_kernel_line() -> str:
    """kt-kernel's bundled sgl_kernel: the payload version its manifest names, and the lengths the fork's
    copy.cu (the sgl-kernel-kt tree's pre-image) has exact kernels for."""
    assert "kt-kernel" in _facts(VENVS["sglang-kt"]), "kt-kernel is not in .venvs/sglang-kt: run `make venvs`"
    copy_cu = subprocess.run(
        [
            "git",
            "-C",
            str(REPO / "build" / "trees" / "sgl-kernel-kt"),
            "show",
            "upstream:sgl-kernel/csrc/elementwise/copy.cu",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lengths = ", ".join(sorted(re.findall(r"if \(N == (\d+)\)", copy_cu), key=int))
    return f"sgl_kernel 0.3.21.post2 (in kt-kernel): copy_to_gpu_no_ce has N = {lengths} only"


def test_kt_env_stock_reaches_the_old_kernel() -> None:
    rc, lines = _doctor("sglang-kt", "stock")
    version = MANIFEST.get("sglang-kt").version
    assert rc == 1 and _kt_route(version) in lines, lines
    assert _state(lines, EXT) == "MISSING" and _state(lines, RUNNER) == "MISSING"
    assert _state(lines, _kt_kernel_line()) == "MISSING"
    assert not any(PLUGIN in line for line in lines)


def test_kt_env_patched_without_the_extension() -> None:
    rc, lines = _doctor("sglang-kt", "patched")
    assert rc == 1 and _kt_route(f"{MANIFEST.get('sglang-kt').version}+{MANIFEST.local_version}") in lines, lines
    assert _state(lines, RUNNER) == "ok" and _state(lines, EXT) == "MISSING"
    assert _state(lines, _kt_kernel_line()) == "MISSING"


def test_kt_env_patched_with_the_extension(ext_site: Path) -> None:
    rc, lines = _doctor("sglang-kt", "patched", ext_site)
    torch = _facts(VENVS["sglang-kt"])["torch"]
    built_for = _torch_pin(ext_site, "sgl-kernel-ext")
    assert rc == 0 and "MISSING" not in "\n".join(lines), lines
    assert _state(lines, f"sgl-kernel-ext 0.2.0 (built for torch{built_for}) loads with torch {torch}") == "ok"
    assert _state(lines, RUNNER) == "ok" and _state(lines, "fast caller path") == "ok"
    assert any(line.endswith("; the route sends them to sgl_kernel_ext") for line in lines), lines


def test_kt_env_extension_that_does_not_load(ext_site: Path, tmp_path: Path) -> None:
    """A damaged native library: installed, but not loadable with this torch, and the route is not complete."""
    broken = tmp_path / "site"
    shutil.copytree(ext_site, broken)
    (library,) = (broken / "sgl_kernel_ext").glob("_C*.so")
    library.write_bytes(b"not an ELF file")
    rc, lines = _doctor("sglang-kt", "patched", broken)
    assert rc == 1 and _state(lines, EXT) == "ok"
    assert _state(lines, "sgl-kernel-ext 0.2.0 (built for torch") == "MISSING"
    fix = lines[lines.index(next(line for line in lines if "loads with torch" in line)) + 1]
    assert "ImportError" in fix and "build sgl_kernel_ext against torch" in fix, fix
    assert _state(lines, _kt_kernel_line()) == "MISSING"


@pytest.mark.parametrize("kind", ["stock", "patched"])
def test_sglang_env_takes_the_plugin(ext_site: Path, kind: str) -> None:
    rc, lines = _doctor("sglang", kind, ext_site)
    version = MANIFEST.get("sglang").version + (f"+{MANIFEST.local_version}" if kind == "patched" else "")
    torch = _facts(VENVS["sglang"])["torch"]
    pin = _torch_pin(_site("sglang", "stock"), "sglang")
    route = (
        f"route: sglang {version} has sglang.srt.plugins: sgl_kernel_ext's entry point replaces sgl-kernel's "
        f"copy_to_gpu_no_ce (torch {torch}, sglang pins torch{pin})"
    )
    assert route in lines and rc == (0 if kind == "patched" else 1), lines
    assert _state(lines, PLUGIN) == "ok" and _state(lines, EXT) == "ok"
    assert not any(RUNNER in line for line in lines)
    without = _doctor("sglang", kind)[1]
    assert route in without and not any(line.startswith("  [") and "sgl-kernel:" in line for line in without)
