"""Patched wheels from synthetic pinned wheels (one or one per Python tag), installed for real; doctor on
stock and patched envs; bad wheel pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from helpers import check_record
from sgl_overlay.builds.doctor import DoctorReport, Finding, report_lines
from sgl_overlay.builds.wheels import wheel_for_python
from sgl_overlay.engine.manifest import load_manifest
from synth import (
    HOOK_PY,
    KERNEL,
    KERNEL_CU,
    KERNEL_TEST,
    KERNEL_TEST_PY,
    MODEL_PY,
    Overlay,
    add_kernel_target,
    blob,
    cli,
    clone,
    git,
    make_overlay,
    pin_wheel,
    pin_wheels,
    write,
)


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _install(python: Path, wheel: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
    )


def _site(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def test_patched_wheel_installs_and_doctor_tells(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    cache = tmp_path / "cache"
    stock = pin_wheel(ov, cache, {"sglang/model.py": MODEL_PY, "sglang/hook.py": HOOK_PY, "sglang/other.py": "o = 1\n"})
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees")]
    for step in (["fetch", "--offline"], ["apply"], ["wheels", "--out", str(tmp_path / "dist")]):
        proc = cli(*base, *step)
        assert proc.returncode == 0, proc.stderr
    (built,) = (tmp_path / "dist").glob("*.whl")
    assert built.name == "sglang-1.0+overlay.1-py3-none-any.whl"

    py_stock, py_patched = _venv(tmp_path / "stock"), _venv(tmp_path / "patched")
    _install(py_stock, stock)
    _install(py_patched, built)
    site_s, site_p = _site(py_stock), _site(py_patched)
    dist_info = site_p / "sglang-1.0+overlay.1.dist-info"
    assert "Version: 1.0+overlay.1" in (dist_info / "METADATA").read_text()
    assert check_record(site_p, dist_info) >= 2
    tree = tmp_path / "trees" / "sglang" / "python" / "sglang"
    for name in ("model.py", "hook.py"):
        assert (site_p / "sglang" / name).read_bytes() == (tree / name).read_bytes()
        assert (site_p / "sglang" / name).read_bytes() != (site_s / "sglang" / name).read_bytes()
    assert (site_p / "sglang/other.py").read_bytes() == (site_s / "sglang/other.py").read_bytes()

    doc = ["--patches", str(ov.patches), "doctor", "--no-live", "--dist", str(tmp_path / "dist")]
    proc = cli(*doc, "--python", str(py_stock))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("[MISSING] sglang") == 2
    assert f"fix: pip install --no-deps --force-reinstall {tmp_path / 'dist' / built.name}" in proc.stdout
    proc = cli(*doc, "--python", str(py_patched))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[ok] sglang") == 2 and "MISSING" not in proc.stdout


def test_wheel_from_user_checkout_uses_upstream_build_and_doctor_knows_it(tmp_path: Path) -> None:
    """`wheels --checkout`: refuses before the series is in, then builds python/ with pip. The checkout is not at
    the pins (a line upstream added on top moves the patches' lines, and the second patch changes a line within the
    first one's context), so the build's files are the checkout's, not the pinned post-images, and neither patch
    reverse-applies alone: doctor names the installed wheel as that build, not MODIFIED."""
    ov = make_overlay(tmp_path, second="line 12")
    co = clone(ov.upstream, tmp_path / "co")
    (co / "python/pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "sglang"\nversion = "1.0"\n\n[tool.setuptools]\npackages = ["sglang"]\n'
    )
    (co / "python/sglang/__init__.py").write_text("")
    write(co, "python/sglang/model.py", "# upstream's line\n" + MODEL_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "local packaging, upstream's line")
    out = tmp_path / "dist"
    proc = cli("--patches", str(ov.patches), "wheels", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 1 and "is applicable in" in proc.stderr, proc.stderr
    assert "run `sgl-overlay apply" in proc.stderr, proc.stderr
    assert cli("--patches", str(ov.patches), "apply", "--checkout", str(co)).returncode == 0
    write(co, "python/sglang/mine.py", "x = 1\n")  # untracked: the build is of HEAD's files only
    proc = cli("--patches", str(ov.patches), "wheels", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("*.whl")
    assert built.name == "sglang-1.0+overlay.1-py3-none-any.whl"  # the overlay's local label
    assert proc.stdout.strip() == f"built {built}"
    with zipfile.ZipFile(built) as zf:
        assert "line 10 fixed" in zf.read("sglang/model.py").decode()
        assert "sglang/mine.py" not in zf.namelist()
    # no build/ or *.egg-info left behind, no worktree
    assert git(co, "status", "--porcelain", "--ignored") == "?? python/sglang/mine.py"
    assert len(git(co, "worktree", "list").splitlines()) == 1
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target"]
    subprocess.run([*pip, str(site), str(built)], check=True)
    doctor = cli("--patches", str(ov.patches), "doctor", "--no-live", "--site", str(site), "--dist", str(out))
    rows = [ln.strip() for ln in doctor.stdout.splitlines() if ln.strip().startswith("[")]
    head = git(co, "rev-parse", "HEAD")[:12]
    assert rows == [
        f"[ok] sglang: installed 1.0+overlay.1: built by `sgl-overlay wheels --checkout` from {co} at {head}, "
        "where the series was in; its files are that commit's"
    ], doctor.stdout
    assert doctor.returncode == 0, doctor
    mark = site / "sglang-1.0+overlay.1.dist-info" / "sgl_overlay_build.json"  # as an older series' build has it
    mark.write_text(mark.read_text().replace(blob((co / "python/sglang/hook.py").read_text()), "0" * 40))
    doctor = cli("--patches", str(ov.patches), "doctor", "--no-live", "--site", str(site), "--dist", str(out))
    assert doctor.returncode == 1, doctor
    assert f"[MISSING] sglang: installed 1.0+overlay.1: built by `sgl-overlay wheels --checkout` from {co} at " in (
        doctor.stdout
    )
    assert f"with another version of the series\n      fix: rebuild it with `sgl-overlay wheels --checkout {co}`" in (
        doctor.stdout
    )


def test_wheel_from_checkout_refuses_what_it_cannot_build(tmp_path: Path) -> None:
    """`-t sgl-kernel` names a kernel wheel (CUDA), a version the build made up is refused: each one line,
    nothing left in the checkout."""
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = clone(ov.upstream, tmp_path / "co")
    write(co, KERNEL, KERNEL_CU)
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    (co / "python/pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "sglang"\nversion = "0.0.0.dev0"\n\n[tool.setuptools]\npackages = ["sglang"]\n'
    )
    (co / "python/sglang/__init__.py").write_text("")
    git(co, "add", "-A")
    git(co, "commit", "-qm", "local packaging")
    base = ["--patches", str(ov.patches)]
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    out = tmp_path / "dist"
    proc = cli(*base, "wheels", "-t", "sgl-kernel", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 1 and "builds the python/ package (sglang or sglang-kt), not sgl-kernel" in proc.stderr
    proc = cli(*base, "wheels", "--checkout", str(co), "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "upstream's build gave sglang version 0.0.0.dev0 (its fallback" in proc.stderr, proc.stderr
    assert git(co, "status", "--porcelain", "--ignored") == "" and not list(out.glob("*.whl"))
    # A build that fails (here: an in-tree backend meeting a read-only file system): its cause, not pip's summary.
    (co / "python/pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "sglang"\nversion = "1.0"\n'
    )
    (co / "python/backend.py").write_text(
        "def build_wheel(*args, **kwargs):\n    raise OSError(30, 'Read-only file system', 'build')\n"
    )
    git(co, "add", "-A")
    git(co, "commit", "-qm", "a build that fails")
    proc = cli(*base, "wheels", "--checkout", str(co), "--out", str(out))
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"sgl-overlay: error: upstream's build of {co / 'python'} failed: "), err
    assert "Read-only file system: 'build'" in err[0], err
    assert git(co, "status", "--porcelain", "--ignored") == ""


# Two pinned wheels of one version, as upstream ships one per Python tag: the tag of the Python
# running the tests, and one that no Python >= 3.11 installs. Their extension stand-in differs.
NATIVE = f"cp{sys.version_info.major}{sys.version_info.minor}"
OTHER = "cp39"


def _tagged_overlay(tmp_path: Path, other_hook: str = HOOK_PY) -> tuple[list[Path], list[str]]:
    ov = make_overlay(tmp_path)
    stock = pin_wheels(
        ov,
        tmp_path / "cache",
        {
            f"sglang-1.0-{tag}-none-any.whl": {
                "sglang/model.py": MODEL_PY,
                "sglang/hook.py": hook,
                "sglang/_native.txt": f"built for {tag}\n",
            }
            for tag, hook in ((NATIVE, HOOK_PY), (OTHER, other_hook))
        },
    )
    base = ["--patches", str(ov.patches), "--cache", str(tmp_path / "cache"), "--trees", str(tmp_path / "trees")]
    for step in (["fetch", "--offline"], ["apply"]):
        proc = cli(*base, *step)
        assert proc.returncode == 0, proc.stderr
    return stock, base


def test_every_pinned_wheel_gets_the_same_post_images(tmp_path: Path) -> None:
    stock, base = _tagged_overlay(tmp_path)
    proc = cli(*base, "wheels", "--out", str(tmp_path / "dist"))
    assert proc.returncode == 0, proc.stderr
    built = {p.name: p for p in (tmp_path / "dist").glob("*.whl")}
    assert sorted(built) == sorted(f"sglang-1.0+overlay.1-{tag}-none-any.whl" for tag in (NATIVE, OTHER))
    tree = tmp_path / "trees" / "sglang" / "python"
    for s in stock:
        patched = built[f"sglang-1.0+overlay.1-{s.name.split('-')[2]}-none-any.whl"]  # spelled out, not computed
        with WheelFile(s) as ws, WheelFile(patched) as wp:  # WheelFile checks each RECORD hash on read
            stock_files = {n for n in ws.namelist() if ".dist-info/" not in n}
            assert stock_files == {n for n in wp.namelist() if ".dist-info/" not in n}
            for name in stock_files:
                want = (tree / name).read_bytes() if name in ("sglang/model.py", "sglang/hook.py") else ws.read(name)
                assert wp.read(name) == want, f"{patched.name}: {name}"
            assert "Tag: " + s.name.split("-")[2] in wp.read("sglang-1.0+overlay.1.dist-info/WHEEL").decode()
    time.sleep(2)  # zip timestamps have a 2 s resolution: a rebuild must not depend on the clock
    again = cli(*base, "wheels", "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    for name, path in built.items():
        assert (tmp_path / "again" / name).read_bytes() == path.read_bytes(), f"{name} is not reproducible"

    manifest = load_manifest(tmp_path / "patches")
    target = manifest.get("sglang")
    assert wheel_for_python(target, sys.version_info[:2]).file == stock[0].name
    assert wheel_for_python(target, (3, 9)).file == stock[1].name
    assert wheel_for_python(target, (3, 10)) is None
    py_stock = _venv(tmp_path / "stock")
    _install(py_stock, stock[0])
    proc = cli(
        "--patches",
        str(tmp_path / "patches"),
        "doctor",
        "--no-live",
        "--dist",
        str(tmp_path / "dist"),
        "--python",
        str(py_stock),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fix = f"fix: pip install --no-deps --force-reinstall {tmp_path / 'dist'}/sglang-1.0+overlay.1-{NATIVE}-none-any.whl"
    assert proc.stdout.count(fix) == 1 and proc.stdout.count("fix: the one above") == 1, proc.stdout  # printed once
    assert "installed here: its copy_to_gpu_no_ce lengths are not checked" in proc.stdout, proc.stdout


def test_twin_wheel_with_another_preimage_is_refused(tmp_path: Path) -> None:
    _, base = _tagged_overlay(tmp_path, other_hook=HOOK_PY.replace("hook 1\n", "hook 1 elsewhere\n"))
    proc = cli(*base, "wheels", "--out", str(tmp_path / "dist"))
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert re.search(
        rf"sglang-1\.0-{OTHER}-none-any\.whl: sglang/hook\.py is blob [0-9a-f]{{40}}, the manifest "
        r"pins blob [0-9a-f]{40} for python/sglang/hook\.py; .*unpin this wheel",
        err[0],
    ), err[0]
    assert not list((tmp_path / "dist").glob(f"*-{OTHER}-*.whl"))


# A manifest edit -> the one error line it must give (name: what is wrong).
BAD_MANIFESTS = {
    "wheel and wheels": (
        lambda t: t.replace("wheels = [", 'wheel = "sglang-1.0-py3-none-any.whl"\nwheels = ['),
        r"target 'sglang' has both `wheel` and `wheels`; keep one",
    ),
    "wheel without sha256": (
        lambda t: re.sub(r', sha256 = "[0-9a-f]+"', "", t, count=1),
        r"target 'sglang': a pinned wheel lacks key 'sha256'",
    ),
    "wheel of another version": (
        lambda t: t.replace("sglang-1.0-cp39", "sglang-1.1-cp39"),
        r"target 'sglang' is version 1\.0, its wheel sglang-1\.1-cp39-none-any\.whl is 1\.1; "
        r"pin the wheel of version 1\.0",
    ),
    "no wheel": (
        lambda t: re.sub(r"wheels = \[.*\]", "wheels = []", t),
        r"target 'sglang' is of kind wheel but pins none",
    ),
    "invalid wheel file name": (
        lambda t: t.replace("sglang-1.0-cp39-none-any.whl", "sglang-1.0.whl"),
        r"target 'sglang': Invalid wheel filename",
    ),
    "unknown kind": (
        lambda t: t.replace('kind = "wheel"', 'kind = "sdist"'),
        r"target 'sglang' has unknown kind 'sdist'; use one of wheel, patch-context",
    ),
    "patch listed twice": (
        lambda t: re.sub(r'patches = \[("[^"]+")', r"patches = [\1, \1", t),
        r"target 'sglang' lists patch 0001-[\w-]+\.patch twice; a series applies each patch once",
    ),
    "patches not a list": (
        lambda t: re.sub(r"patches = \[.*\]", "patches = 7", t),
        r"manifest\.toml: target 'sglang': `patches` is 7, not a list of strings; fix that key",
    ),
    "a NUL in a patch name": (
        lambda t: t.replace('patches = ["', 'patches = ["x\\u0000', 1),
        r"manifest\.toml: target 'sglang': `patches` names 'x\\x000001-[\w-]+\.patch', which is not a file in "
        r"patches/sglang/",
    ),
    "a patch name that leaves patches/": (
        lambda t: t.replace('patches = ["', 'patches = ["../../x.patch", "', 1),
        r"manifest\.toml: target 'sglang': `patches` names '\.\./\.\./x\.patch', which is not a file in patches/sglang/",
    ),
    "invalid local_version": (
        lambda t: t.replace("schema = 1\n", 'schema = 1\nlocal_version = "not valid!"\n'),
        r"manifest\.toml: `local_version` is 'not valid!', not a PEP 440 local version label",
    ),
    "no schema": (
        lambda t: t.replace("schema = 1\n", ""),
        r"manifest\.toml lacks `schema = 1`; add that line at its top",
    ),
    "other schema": (
        lambda t: t.replace("schema = 1\n", "schema = 2\n"),
        r"manifest\.toml is schema 2, this sgl-overlay reads schema 1",
    ),
}


@pytest.fixture(scope="module")
def two_wheels(tmp_path_factory: pytest.TempPathFactory) -> Overlay:
    """An overlay pinning two wheels (the cache beside its patches/), made once for every bad-manifest case."""
    tmp = tmp_path_factory.mktemp("two-wheels")
    ov = make_overlay(tmp)
    wheels = {f"sglang-1.0-{tag}-none-any.whl": {"sglang/model.py": MODEL_PY} for tag in (NATIVE, OTHER)}
    pin_wheels(ov, tmp / "cache", wheels)
    return ov


@pytest.mark.parametrize("name", list(BAD_MANIFESTS))
def test_bad_manifest(tmp_path: Path, name: str, two_wheels: Overlay) -> None:
    edit, message = BAD_MANIFESTS[name]
    patches = shutil.copytree(two_wheels.patches, tmp_path / "patches")
    manifest = patches / "manifest.toml"
    manifest.write_text(edit(manifest.read_text()))
    proc = cli("--patches", str(patches), "--cache", str(two_wheels.patches.parent / "cache"), "fetch", "--offline")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert re.search(message, err[0]), err[0]


def test_print_names_lists_each_pinned_wheel_and_its_twin(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    stock = pin_wheels(
        ov,
        tmp_path / "cache",
        {f"sglang-1.0-{tag}-none-any.whl": {"sglang/model.py": MODEL_PY} for tag in (NATIVE, OTHER)},
    )
    base = [
        "--patches",
        str(ov.patches),
        "--cache",
        str(tmp_path / "cache"),
        "wheels",
        "--print-names",
        "--out",
        str(tmp_path / "dist"),
    ]
    proc = cli(*base)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert [r[:4] for r in rows] == [
        ["sglang", tag, str(s), str(tmp_path / "dist" / f"sglang-1.0+overlay.1-{tag}-none-any.whl")]
        for tag, s in zip((NATIVE, OTHER), stock)
    ]
    assert rows[1][4:] == [
        "--only-binary=:all:",
        "--platform",
        "any",
        "--abi",
        "none",
        "--implementation",
        "cp",
        "--python-version",
        "39",
    ]
    (only,) = cli(*base, "--for-python", "3.9").stdout.splitlines()
    assert only.split()[:2] == ["sglang", OTHER]
    none = cli(*base, "--for-python", "3.10")
    assert none.returncode == 1 and "no pinned sglang wheel fits Python 3.10" in none.stderr


def test_report_lines():
    """Each fix once, under the first finding it mends; no kernel checked; nothing installed."""
    findings = [
        Finding("sglang", "fix a", False, "pip install x"),
        Finding("sglang", "fix b", False, "pip install x"),
        Finding("sglang", "fix c", True, "unused"),
    ]
    report = DoctorReport("/env/bin/python", [("sglang", "0.5.23", "/env/site"), ("sgl-kernel", "0.3", None)], findings)
    assert report_lines(report) == [
        "environment: /env/bin/python",
        "sglang 0.5.23 at /env/site",
        "sgl-kernel 0.3",
        "  [MISSING] sglang: fix a",
        "      fix: pip install x",
        "  [MISSING] sglang: fix b",
        "      fix: the one above",
        "  [ok] sglang: fix c",
    ]
    assert not report.ok
    alone = DoctorReport("/p", [], [Finding("sglang", "fix c", True, "")], ("sglang-kernel", "sgl-kernel"))
    assert alone.ok
    assert report_lines(alone)[1] == (
        "no sglang-kernel or sgl-kernel installed here: its copy_to_gpu_no_ce lengths are not checked"
    )
    empty = DoctorReport("/p", [], [], ("sgl-kernel",))
    assert not empty.ok
    assert report_lines(empty) == [
        "environment: /p",
        "no sglang, sglang-kt or sgl-kernel installed here; pass --python of the serving env",
    ]
