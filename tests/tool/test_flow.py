"""The normal paths: fetch a pinned wheel into a tree, status/apply/verify/revert, user checkouts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from synth import (
    HOOK_PY,
    MODEL_PY,
    blob,
    cli,
    clone,
    edit_line,
    git,
    make_overlay,
    make_upstream,
    pin_wheel,
    snapshot,
    write,
)


def _run(*args: str) -> str:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _states(text: str) -> list[str]:
    return re.findall(r"^  (.+?)\s{2,}\S+\.patch", text, re.M)


def test_fetch_apply_verify_revert_on_laid_out_tree(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    cache = pin_wheel(ov, tmp_path / "cache").parent
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees")]
    out = _run(*base, "fetch", "--offline")
    assert "from cache (sha256 ok)" in out and "laid out (2 files" in out
    tree = tmp_path / "trees" / "sglang"
    assert (tree / "python/sglang/model.py").read_text() == MODEL_PY
    assert git(tree, "log", "--format=%s", "upstream") == "upstream sglang 1.0"
    assert "ready" in _run(*base, "fetch", "--offline")  # idempotent

    assert _states(_run(*base, "status")) == ["applicable", "applicable"]
    assert "applied 2 patch(es)" in _run(*base, "apply")
    assert _states(_run(*base, "status")) == ["applied", "applied"]
    assert "verified sglang" in _run(*base, "verify")
    assert "line 10 fixed" in (tree / "python/sglang/model.py").read_text()
    assert (tree / "test/test_model.py").exists()

    # Same pins, another folder: identical commit ids (fixed identity and dates).
    other = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees2")]
    _run(*other, "fetch", "--offline")
    _run(*other, "apply")
    assert git(tree, "rev-parse", "HEAD") == git(tmp_path / "trees2" / "sglang", "rev-parse", "HEAD")

    assert "reverted 2 overlay commit(s)" in _run(*base, "revert")
    assert git(tree, "rev-parse", "HEAD") == git(tree, "rev-parse", "upstream")
    assert _run(*base, "revert").startswith("nothing to revert")


def test_verify_catches_a_hand_edit(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    cache = pin_wheel(ov, tmp_path / "cache").parent
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees")]
    _run(*base, "fetch", "--offline")
    _run(*base, "apply")
    tree = tmp_path / "trees" / "sglang"
    write(tree, "python/sglang/hook.py", "edited\n")
    git(tree, "commit", "-qam", "hand edit")
    proc = cli(*base, "verify")
    assert proc.returncode == 1
    assert re.search(r"python/sglang/hook\.py is blob [0-9a-f]{40}, the series ends at [0-9a-f]{40}", proc.stderr)


def test_user_checkout_warns_on_other_preimage_and_applies(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 1\n", "line 1 local\n"))
    git(co, "commit", "-qam", "their change")
    proc = cli("--patches", str(ov.patches), "apply", "--checkout", str(co))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"warning: sglang: pre-image differs: python/sglang/model\.py: expected blob", proc.stdout)
    assert git(co, "log", "--format=%s", "-3").splitlines() == [
        "hook: fix line 5 and model line 30",
        "model: fix line 10",
        "their change",
    ]
    assert "line 1 local" in (co / "python/sglang/model.py").read_text()  # their change kept
    # Their commit on top of ours: revert must use `git revert`, keeping their commit.
    write(co, "NOTES", "mine\n")
    git(co, "add", "NOTES")
    git(co, "commit", "-qm", "their later commit")
    out = _run("--patches", str(ov.patches), "revert", "--checkout", str(co))
    assert "(git revert)" in out
    assert (co / "NOTES").exists() and "line 10 fixed" not in (co / "python/sglang/model.py").read_text()


def test_status_classes_upstream_and_3way(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    # Upstream landed the first fix on its own (other commit message), and touched line 4 of hook.py,
    # inside patch 2's context: exact apply fails there, a 3-way merge succeeds.
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 10\n", "line 10 fixed\n"))
    write(co, "test/test_model.py", "def test_fixed():\n    assert True\n")
    write(co, "python/sglang/hook.py", edit_line(HOOK_PY, "hook 3\n", "hook 3 upstream\n"))
    git(co, "add", "-A")
    git(co, "commit", "-qm", "upstream: same fix, other words")
    out = _run("--patches", str(ov.patches), "status", "--checkout", str(co))
    assert _states(out) == ["already upstream", "applicable (3-way)"]
    before_log = git(co, "rev-list", "--count", "HEAD")
    out = _run("--patches", str(ov.patches), "apply", "--checkout", str(co))
    assert "applied 1 patch(es)" in out
    assert int(git(co, "rev-list", "--count", "HEAD")) == int(before_log) + 1
    hook = (co / "python/sglang/hook.py").read_text()
    assert "hook 3 upstream" in hook and "hook 5 fixed" in hook


def test_full_context_target_rebuilt_without_network(tmp_path: Path) -> None:
    """A patch-context target: the pre-image comes from the patch itself, proven by blob id."""
    files = {"sgl-kernel/csrc/copy.cu": "int a;\nint b;\n", "sgl-kernel/tests/t.py": "x = 1\n"}
    up = make_upstream(tmp_path / "up", name="sglang", files=files)
    write(up, "sgl-kernel/csrc/copy.cu", "int a;\nint b2;\n")
    write(up, "sgl-kernel/tests/t.py", "x = 2\n")
    git(up, "commit", "-qam", "kernel: fix b")
    out = tmp_path / "patches" / "sgl-kernel"
    out.mkdir(parents=True)
    git(up, "format-patch", "-q", "--full-index", "-U100000", "-o", str(out), "HEAD~1..HEAD")
    name = next(out.glob("*.patch")).name
    (tmp_path / "patches" / "manifest.toml").write_text(
        'schema = 1\n[targets.sgl-kernel]\nkind = "patch-context"\nversion = "abc"\nupstream = "u"\ncommit = "abc"\n'
        f'context = "full"\nmarker = "sgl-kernel/csrc/copy.cu"\npatches = ["{name}"]\n'
        f'[targets.sgl-kernel.preimages]\n"sgl-kernel/csrc/copy.cu" = "{blob(files["sgl-kernel/csrc/copy.cu"])}"\n'
        f'"sgl-kernel/tests/t.py" = "{blob(files["sgl-kernel/tests/t.py"])}"\n'
    )
    base = ["--patches", str(tmp_path / "patches"), "--trees", str(tmp_path / "trees")]
    _run(*base, "fetch", "--offline")
    tree = tmp_path / "trees" / "sgl-kernel"
    assert (tree / "sgl-kernel/csrc/copy.cu").read_text() == files["sgl-kernel/csrc/copy.cu"]
    _run(*base, "apply")
    assert "verified sgl-kernel" in _run(*base, "verify")
    # A hand-edited patch cannot prove its pre-image: fetch refuses, nothing is laid out.
    patch = out / name
    patch.write_text(patch.read_text().replace(" int a;", " int A;"))
    before = snapshot(tmp_path / "trees2")
    proc = cli("--patches", str(tmp_path / "patches"), "--trees", str(tmp_path / "trees2"), "fetch")
    assert proc.returncode == 1
    assert "hashes to" in proc.stderr and "the patch was edited by hand" in proc.stderr
    assert snapshot(tmp_path / "trees2") == before


@pytest.mark.parametrize("module", ["sgl_overlay", "sgl_overlay.cli"])
def test_python_m_runs_the_command_line(module: str) -> None:
    from sgl_overlay import __version__

    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"sgl-overlay {__version__}"), proc.stderr
