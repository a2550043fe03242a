"""Upstream's own pre-commit hooks on every file the series change, in every patched tree.

sgl-project/sglang's `.pre-commit-config.yaml` runs isort 5.13.2 (`.isort.cfg`: profile black,
first party `sglang`), black 24.10.0, clang-format 18.1.8 (`--style=file`; sgl-kernel's
`.clang-format`, which `tests/kernel/sgl-kernel.clang-format` keeps) and codespell 2.4.1 with its
ignore list. Upstream's own files do not all pass them (the pinned `fused_moe_triton/layer.py` and
`deep_gemm.py` fail isort), so a patch is held to what it adds. For each added or modified file of
each tree: black formats only the lines the series adds or joins (its own `--line-ranges`: one run
on the post-image, where formatting 7,000-line files whole, twice each, took most of the suite's
time); for isort and clang-format, a fix the post-image (`HEAD`) needs and the pre-image
(`upstream`) did not is a finding; codespell reads only the added lines. The versions are
upstream's pins (requirements/sglang.txt).

Nothing is stubbed: the formatters run as subprocesses on the real files.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import unidiff

from helpers import REPO_ROOT, TREES, side_by_side

TARGETS = ("sglang", "sglang-kt", "sgl-kernel")
CLANG_FORMAT_STYLE = REPO_ROOT / "tests" / "kernel" / "sgl-kernel.clang-format"
CXX_SUFFIXES = {".cu", ".cuh", ".cc", ".cpp", ".h", ".hpp"}
# codespell's `-L` from upstream's hook plus `[tool.codespell] ignore-words-list` of python/pyproject.toml
CODESPELL_IGNORE = "cann,thi,makro,wil,rouge,PRIS,ans,als,hel,boostrap,childs,te,vas,hsa,ment"
VERSIONS = {"black": "24.10.0", "isort": "5.13.2", "clang-format": "18.1.8", "codespell": "2.4.1"}


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.fail(f"{name} is not installed in this venv: run scripts/setup_venvs.sh (requirements/sglang.txt)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    assert VERSIONS[name] in version, f"{name}: upstream pins {VERSIONS[name]}, this venv has {version.strip()}"
    return exe


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True).stdout


def _fixes(cmd: list[str], text: str) -> dict[tuple, int]:
    """What the formatter would change in `text`: (removed lines, added lines) per hunk, with the
    number of times each occurs; positions are left out so that a change the pre-image already
    needs counts in both images."""
    return Counter(key for key, _ in _hunks(cmd, text))


def _hunks(cmd: list[str], text: str) -> list[tuple[tuple, int]]:
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or (not proc.stdout and text):
        pytest.fail(f"{cmd[0]} failed: {proc.stderr.strip()}")
    old, new = text.splitlines(), proc.stdout.splitlines()
    ops = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    return [((tuple(old[i1:i2]), tuple(new[j1:j2])), i1 + 1) for op, i1, i2, j1, j2 in ops if op != "equal"]


def _formatters(rel: str, changed: list[str]) -> list[tuple[str, list[str]]]:
    """Upstream's formatting hooks for one file, each reading stdin and writing the fixed file;
    black only over `changed` (line ranges of the post-image)."""
    suffix = Path(rel).suffix
    if suffix == ".py":
        return [
            ("isort", [_tool("isort"), "--profile", "black", "-p", "sglang", "-"]),
            ("black", [_tool("black"), "-q", *(f"--line-ranges={r}" for r in changed), "-"]),
        ]
    if suffix in CXX_SUFFIXES:
        return [
            ("clang-format", [_tool("clang-format"), f"--style=file:{CLANG_FORMAT_STYLE}", f"--assume-filename={rel}"])
        ]
    return []


def _show(tree: Path, rev: str, rel: str) -> str:
    proc = subprocess.run(["git", "-C", str(tree), "show", f"{rev}:{rel}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def _added_lines(diff: str) -> str:
    return "".join(line[1:] + "\n" for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def _changed_ranges(diff: str) -> list[str]:
    """The post-image lines each hunk of a `-U0` diff adds (`start-end`), or, for a hunk that only
    removes lines, the two it joins."""
    hunks = unidiff.PatchSet(diff)[0] if diff else []
    return [
        f"{h.target_start}-{h.target_start + h.target_length - 1}"
        if h.target_length
        else f"{max(h.target_start, 1)}-{h.target_start + 1}"
        for h in hunks
    ]


def _file_findings(tree: Path, rel: str) -> list[str]:
    out: list[str] = []
    diff = _git(tree, "diff", "-U0", "upstream", "HEAD", "--", rel)
    pre, post = _show(tree, "upstream", rel), _show(tree, "HEAD", rel)
    for hook, cmd in _formatters(rel, _changed_ranges(diff)):
        post_hunks = _hunks(cmd, post)
        new = Counter(key for key, _ in post_hunks)
        if hook != "black":  # black formatted only what the series changed
            new -= _fixes(cmd, pre)
        for (removed, added), line in post_hunks:
            if new[(removed, added)]:
                out.append(f"{rel}:{line}: {hook} would replace {list(removed)} with {list(added)}")
                break
    proc = subprocess.run(
        [_tool("codespell"), "-L", CODESPELL_IGNORE, "-"],
        input=_added_lines(diff),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        out.append(f"{rel}: codespell: {proc.stdout.strip()}")
    return out


def findings(tree: Path) -> list[str]:
    """One entry per (file, hook) where upstream's pre-commit would reject what `upstream..HEAD` adds:
    a formatter fix the post-image needs and the pre-image did not, or a misspelling on an added line.
    The files are checked side by side (black on a large file takes seconds)."""
    changed = _git(tree, "diff", "--name-only", "--diff-filter=AM", "upstream", "HEAD").split()
    per_file = side_by_side({rel: lambda rel=rel: _file_findings(tree, rel) for rel in changed})
    return [line for rel in changed for line in per_file[rel]]


@pytest.mark.parametrize("target", TARGETS)
def test_series_pass_upstream_hooks(target):
    tree = TREES / target
    if not (tree / ".git").exists():
        pytest.fail(f"{tree} is missing: run `make trees`")
    assert _git(tree, "rev-list", "--count", "upstream..HEAD").strip() != "0", f"{target}: no patch applied"
    assert findings(tree) == []


def test_hooks_catch_what_upstream_rejects(tmp_path):
    """The same checks on a tree whose one commit breaks each hook: every break is reported."""
    tree = tmp_path / "tree"
    tree.mkdir()
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tree / "mod.py").write_text("import os\n\n\nx = 1\n")
    (tree / "k.cu").write_text("int f(int a) { return a; }\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "upstream"], check=True)
    subprocess.run([*git, "tag", "upstream"], check=True)
    (tree / "mod.py").write_text("import sys\nimport os\n\n\nx = {'a':1}  # recieve\n")
    (tree / "k.cu").write_text("int f(int a){return a;}\n")
    subprocess.run([*git, "commit", "-qam", "patch"], check=True)
    hooks = sorted(line.split(": ")[1].split()[0] for line in findings(tree))
    assert hooks == ["black", "clang-format", "codespell", "isort"]
