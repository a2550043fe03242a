"""Small synthetic upstream projects, patch series and manifests for the tool's own tests."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from sgl_overlay.engine.gitutil import hash_bytes

REPO_ROOT = Path(__file__).resolve().parents[2]
IDENT = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
}

MODEL_PY = "".join(f"line {i}\n" for i in range(1, 41))
HOOK_PY = "".join(f"hook {i}\n" for i in range(1, 21))


def git(repo: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, **IDENT}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args} failed: {proc.stderr}")
    return proc.stdout.strip()


def blob(data: str) -> str:
    return hash_bytes(data.encode())


def clone(src: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", str(src), str(dest))
    return dest


def write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_upstream(path: Path, name: str = "sglang", files: dict[str, str] | None = None) -> Path:
    """A git checkout shaped like sgl-project/sglang: python/pyproject.toml + python/sglang/..."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write(path, "python/pyproject.toml", f'[project]\nname = "{name}"\n')
    for rel, text in (files or {"python/sglang/model.py": MODEL_PY, "python/sglang/hook.py": HOOK_PY}).items():
        write(path, rel, text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "upstream")
    return path


def edit_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@dataclass
class Overlay:
    """A patches/ folder with a manifest and a two-patch series for target `sglang`."""

    patches: Path
    upstream: Path
    series: list[Path]


def make_overlay(tmp: Path, target: str = "sglang", second: str = "line 30") -> Overlay:
    """Author two patches in a scratch clone, as a maintainer would, and pin them. The second
    one changes model.py at `second` (within the first one's context when it is line 11 or 12)."""
    upstream = make_upstream(tmp / "upstream", name=target)
    work = clone(upstream, tmp / "work")
    write(work, "python/sglang/model.py", edit_line(MODEL_PY, "line 10\n", "line 10 fixed\n"))
    write(work, "test/test_model.py", "def test_fixed():\n    assert True\n")
    git(work, "add", "-A")
    message = ("model: fix line 10", "Why: it was wrong.\n\nLink: https://example.com/1\nOrigin: vendor")
    git(work, "commit", "-q", "-m", message[0], "-m", message[1])
    fixed = (work / "python/sglang/model.py").read_text()
    write(work, "python/sglang/model.py", edit_line(fixed, f"{second}\n", f"{second} fixed\n"))
    write(work, "python/sglang/hook.py", edit_line(HOOK_PY, "hook 5\n", "hook 5 fixed\n"))
    git(work, "commit", "-q", "-am", "hook: fix line 5 and model line 30", "-m", "Origin: vendor")
    patches = tmp / "patches"
    out = patches / target
    out.mkdir(parents=True)
    git(work, "format-patch", "-q", "--full-index", "-o", str(out), "HEAD~2..HEAD")
    series = sorted(out.glob("*.patch"))
    names = ", ".join(f'"{p.name}"' for p in series)
    (patches / "manifest.toml").write_text(
        f'schema = 1\n\n[targets.{target}]\nkind = "wheel"\nversion = "1.0"\n'
        f'upstream = "https://example.com/{target}"\nrequirement = "{target}==1.0"\n'
        f'wheel = "{target.replace("-", "_")}-1.0-py3-none-any.whl"\nsha256 = "{"0" * 64}"\n'
        f'layout = {{ sglang = "python/sglang" }}\nproject_name = "{target}"\npatches = [{names}]\n\n'
        f'[targets.{target}.preimages]\n"python/sglang/model.py" = "{blob(MODEL_PY)}"\n'
        f'"python/sglang/hook.py" = "{blob(HOOK_PY)}"\n'
    )
    return Overlay(patches=patches, upstream=upstream, series=series)


def make_wheel(path: Path, files: dict[str, str]) -> str:
    """Write a real wheel (RECORD included; name and version from the file name) and
    return its sha256."""
    name, version = path.name.split("-")[:2]
    tags = "".join(f"Tag: {t}\n" for t in sorted(map(str, parse_wheel_filename(path.name)[3])))
    with WheelFile(path, "w") as wf:
        for rel, text in files.items():
            wf.writestr(rel, text)
        info = f"{name}-{version}.dist-info"
        wf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n{tags}")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin_wheel(ov: Overlay, cache: Path, files: dict[str, str] | None = None) -> Path:
    """The overlay's pinned wheel (sglang 1.0) in `cache`, its sha256 written into the manifest."""
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / "sglang-1.0-py3-none-any.whl"
    sha = make_wheel(wheel, files or {"sglang/model.py": MODEL_PY, "sglang/hook.py": HOOK_PY})
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("0" * 64, sha))
    return wheel


def pin_wheels(ov: Overlay, cache: Path, wheels: dict[str, dict[str, str]]) -> list[Path]:
    """Several pinned wheels of sglang 1.0 (file name -> contents, one per Python tag) in `cache`,
    written into the manifest as `wheels = [...]` in this order."""
    cache.mkdir(parents=True, exist_ok=True)
    paths = [cache / name for name in wheels]
    pins = ", ".join(
        f'{{ file = "{p.name}", sha256 = "{make_wheel(p, files)}" }}' for p, files in zip(paths, wheels.values())
    )
    manifest = ov.patches / "manifest.toml"
    text = manifest.read_text()
    single = f'wheel = "sglang-1.0-py3-none-any.whl"\nsha256 = "{"0" * 64}"\n'
    assert single in text
    manifest.write_text(text.replace(single, f"wheels = [{pins}]\n"))
    return paths


def snapshot(repo: Path) -> tuple:
    """HEAD, refs, status and the hash of every file: equal snapshots mean an unchanged tree."""
    if not repo.exists():
        return ("absent",)
    files = {}
    for p in sorted(repo.rglob("*")):
        if p.is_file() and ".git" not in p.relative_to(repo).parts:
            files[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()
    is_git = (repo / ".git").exists()
    return (
        git(repo, "rev-parse", "HEAD", check=False) if is_git else None,
        git(repo, "for-each-ref", check=False) if is_git else None,
        git(repo, "status", "--porcelain", "--ignored", check=False) if is_git else None,
        files,
    )


TOOL = [sys.executable, "-m", "sgl_overlay"]  # the tool as a process of its own, from this venv
ERROR = "sgl-overlay: error: "


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOL, *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})})


def one_error(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    """The tool's one error line (exit `code`), without its prefix."""
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert len(err) == 1 and err[0].startswith(ERROR), proc.stderr
    return err[0].removeprefix(ERROR)


def _default_signals() -> None:
    """The tool starts with Ctrl-C and SIGTERM at their defaults, whatever the test runs under (a background job
    of a script starts with Ctrl-C ignored, and the tool keeps an inherited ignore)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def spawn(*args: str, env: dict[str, str] | None = None, stdout: object = subprocess.PIPE) -> subprocess.Popen:
    """The tool started in the background, for a test that signals or kills it while it runs."""
    return subprocess.Popen(
        [*TOOL, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=_default_signals,
    )


# ----------------------------------------------------------------------------- fork-shaped checkouts

KERNEL = "sgl-kernel/csrc/elementwise/copy.cu"
KERNEL_TEST = "sgl-kernel/tests/test_copy.py"
AOT = "python/sglang/kernels/aot/"  # where sgl-project/sglang moved sgl-kernel/
KERNEL_CU = "".join(f"kernel {i}\n" for i in range(1, 31))
KERNEL_TEST_PY = """import pytest
import torch

from kern import copy


@pytest.mark.parametrize("size", [64, 72])
def test_copy(size):
    copy(size)


if __name__ == "__main__":
    pytest.main([__file__])
"""
# What the kernel patch makes of it: a constant after the imports, more sizes, one more test.
KERNEL_TEST_FIXED = (
    KERNEL_TEST_PY.replace("from kern import copy\n", "from kern import copy\n\nMAX_N = 512\n")
    .replace("[64, 72]", "[16, 17, 32, 64, 72, 512]")
    .replace("\n\nif __name__", "\n\ndef test_too_large():\n    pass\n\n\nif __name__")
)
# Upstream's later edit of the same test file (an import on top, the exit code at the end): a
# 3-way merge with the patch is clean, but merging the patch again into the result is not.
KERNEL_TEST_UPSTREAM = "import sys\n\n" + KERNEL_TEST_PY.replace(
    "    pytest.main([__file__])", "    sys.exit(pytest.main([__file__]))"
)
KT_MARKER = "python/sglang/srt/layers/moe/benchmark_kt_ep.py"  # a file only the KT fork has
SGLANG_URL = "https://github.com/sgl-project/sglang"
KT_URL = "https://github.com/kvcache-ai/sglang"


def add_kernel_target(ov: Overlay, tmp: Path, upstream: str, name: str = "sgl-kernel", kernel: str = KERNEL_CU) -> Path:
    """Add an `sgl-kernel` target (or `name`, pinned at copy.cu `kernel`: a fork's port, same subject) to the
    overlay's manifest: one full-context patch (as the real one is written) changing kernel line 15 of copy.cu
    and its test; returns the patch."""
    work = make_upstream(tmp / f"{name}-work", files={KERNEL: kernel, KERNEL_TEST: KERNEL_TEST_PY})
    write(work, KERNEL, edit_line(kernel, "kernel 15\n", "kernel 15 fixed\n"))
    write(work, KERNEL_TEST, KERNEL_TEST_FIXED)
    git(work, "commit", "-qam", "sgl-kernel: copy every length", "-m", "Origin: vendor")
    out = ov.patches / name
    out.mkdir()
    git(work, "format-patch", "-q", "--full-index", "-U100000", "-o", str(out), "HEAD~1..HEAD")
    patch = next(out.glob("*.patch"))
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(
        manifest.read_text()
        + (
            f'\n[targets.{name}]\nkind = "patch-context"\nversion = "abc"\nupstream = "{upstream}"\n'
            f'commit = "abc"\ncontext = "full"\nmarker = "{KERNEL}"\npatches = ["{patch.name}"]\n\n'
            f'[targets.{name}.preimages]\n"{KERNEL}" = "{blob(kernel)}"\n"{KERNEL_TEST}" = "{blob(KERNEL_TEST_PY)}"\n'
        )
    )
    return patch


def make_fork_overlay(tmp: Path) -> Overlay:
    """An overlay shaped like the real one: `sglang-kt` (project, KT fork, two patches), `sglang`
    (project, sgl-project, no patches here) and `sgl-kernel` (component of sgl-project)."""
    ov = make_overlay(tmp, target="sglang-kt")
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'upstream = "https://example.com/sglang-kt"', f'upstream = "{KT_URL}"\nmarker = "{KT_MARKER}"'
        )
        + f'\n[targets.sglang]\nkind = "wheel"\nversion = "1.0"\nupstream = "{SGLANG_URL}"\nproject_name = "sglang"\n'
        f'wheel = "sglang-1.0-py3-none-any.whl"\nsha256 = "{"0" * 64}"\npatches = []\n'
    )
    add_kernel_target(ov, tmp, SGLANG_URL)
    return ov


def make_fork_checkout(
    ov: Overlay, dest: Path, kernel: str = KERNEL_CU, name: str = "sglang-kt", kernel_test: str = KERNEL_TEST_PY
) -> Path:
    """A kvcache-ai/sglang-shaped clone: the KT package, the fork's marker file, and its own
    sgl-kernel/ copy. `kernel` and `kernel_test` are the fork's copy.cu and test, committed on
    top of the pinned ones (so a 3-way merge finds the pinned blobs in history, as in the real fork)."""
    co = clone(ov.upstream, dest)
    write(co, "python/pyproject.toml", f'[project]\nname = "{name}"\n')
    write(co, KT_MARKER, "# KT benchmark\n")
    write(co, KERNEL, KERNEL_CU)
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "fork: KT package and sgl-kernel copy")
    if (kernel, kernel_test) != (KERNEL_CU, KERNEL_TEST_PY):
        write(co, KERNEL, kernel)
        write(co, KERNEL_TEST, kernel_test)
        git(co, "commit", "-qam", "fork: its own copy.cu and test")
    return co


# Git hook bodies that hold `git am` inside a hook until the test has acted, however slow the machine: no
# window to hit. Each first makes {marker}, which the test waits for.
# Until the tool is killed (git dies with it, its hook sees the parent gone), then makes {marker}.done.
PARK = "touch {marker}\nwhile kill -0 $PPID 2>/dev/null; do sleep 0.02; done\ntouch {marker}.done\n"
# Until the test makes {marker}.release (at most 10 minutes, so that a failed test cannot leave it behind).
HOLD = "touch {marker}\ni=0\nwhile [ ! -e {marker}.release ] && [ $i -lt 30000 ]; do sleep 0.02; i=$((i+1)); done\n"


def wait_for(path: Path, proc: subprocess.Popen | None = None, seconds: float = 600) -> None:
    """Until a hook has made `path`; fails if `proc` (the tool) ended first, or after `seconds` (a hang)."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def hook(co: Path, name: str, body: str) -> None:
    """Install the git hook `name` running `body` in the checkout `co`."""
    path = co / ".git" / "hooks" / name
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)


def kill_inside_am(tmp: Path, co: Path, base: list[str], name: str, nth: int, env: dict[str, str] | None = None) -> int:
    """Run apply and SIGKILL it while git am is inside the hook `name` for the `nth` patch; returns the tool's pid."""
    count, marker = tmp / "count", tmp / "parked"
    count.unlink(missing_ok=True)
    marker.unlink(missing_ok=True)
    hook(co, name, f"echo x >> {count}\nif [ $(wc -l < {count}) -eq {nth} ]; then\n{PARK.format(marker=marker)}fi\n")
    proc = spawn(*base, "apply", "--checkout", str(co), env=env)
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))  # git am, killed with the tool, is gone
    (co / ".git" / "hooks" / name).unlink()
    return proc.pid
