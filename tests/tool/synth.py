"""Small synthetic upstream projects, patch series and manifests for the tool's own tests."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from sgl_overlay.gitutil import hash_bytes

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

    def manifest_text(self, extra: str = "") -> str:
        return (self.patches / "manifest.toml").read_text() + extra


def make_overlay(tmp: Path, target: str = "sglang") -> Overlay:
    """Author two patches in a scratch clone, as a maintainer would, and pin them."""
    upstream = make_upstream(tmp / "upstream", name=target)
    work = clone(upstream, tmp / "work")
    write(work, "python/sglang/model.py", edit_line(MODEL_PY, "line 10\n", "line 10 fixed\n"))
    write(work, "test/test_model.py", "def test_fixed():\n    assert True\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "model: fix line 10", "-m", "Why: it was wrong.\n\nLink: https://example.com/1")
    fixed = (work / "python/sglang/model.py").read_text()
    write(work, "python/sglang/model.py", edit_line(fixed, "line 30\n", "line 30 fixed\n"))
    write(work, "python/sglang/hook.py", edit_line(HOOK_PY, "hook 5\n", "hook 5 fixed\n"))
    git(work, "commit", "-q", "-am", "hook: fix line 5 and model line 30")
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


def pin_wheel(ov: "Overlay", cache: Path, files: dict[str, str] | None = None) -> Path:
    """The overlay's pinned wheel (sglang 1.0) in `cache`, its sha256 written into the manifest."""
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / "sglang-1.0-py3-none-any.whl"
    sha = make_wheel(wheel, files or {"sglang/model.py": MODEL_PY, "sglang/hook.py": HOOK_PY})
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("0" * 64, sha))
    return wheel


def pin_wheels(ov: "Overlay", cache: Path, wheels: dict[str, dict[str, str]]) -> list[Path]:
    """Several pinned wheels of sglang 1.0 (file name -> contents, one per Python tag) in `cache`,
    written into the manifest as `wheels = [...]` in this order."""
    cache.mkdir(parents=True, exist_ok=True)
    paths = [cache / name for name in wheels]
    pins = ", ".join(f'{{ file = "{p.name}", sha256 = "{make_wheel(p, files)}" }}' for p, files in zip(paths, wheels.values()))
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


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "sgl_overlay", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env)
