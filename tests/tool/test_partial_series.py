"""A series the user left part-way with git's own commands (a reset or bisect to the middle of it, a rebase stopped
at `edit`, a `git revert` of one overlay commit), and a newer series that changed a patch: each patch's true state."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from synth import IDENT, MODEL_PY, cli, clone, edit_line, git, make_overlay, write

ROW = re.compile(r"^  (.+?)\s{2,}\S+/(\d{4})-", re.M)


def _three_patches(tmp: Path) -> tuple[list[str], Path]:
    """model line 10; model line 11 (in the first one's context) and hook 5; hook 15: applied in a checkout."""
    ov = make_overlay(tmp, second="line 11")
    work = tmp / "work"
    write(
        work,
        "python/sglang/hook.py",
        edit_line((work / "python/sglang/hook.py").read_text(), "hook 15\n", "hook 15 x\n"),
    )
    git(work, "commit", "-qam", "hook: fix line 15", "-m", "Origin: vendor")
    git(work, "format-patch", "-q", "--full-index", "--start-number", "3", "-o", str(ov.patches / "sglang"), "HEAD~1..")
    manifest = ov.patches / "manifest.toml"
    third = next((ov.patches / "sglang").glob("0003-*.patch")).name
    manifest.write_text(manifest.read_text().replace('.patch"]', f'.patch", "{third}"]', 1))
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp / "checkout")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    return base, co


def _states(base: list[str], co: Path) -> list[str]:
    proc = cli(*base, "status", "--checkout", str(co))
    return [state for state, _ in ROW.findall(proc.stdout)]


LEFT = {  # how the user leaves the series -> the states git's history says (the commits on HEAD, not reverted)
    "reset to the middle": (["reset", "-q", "--hard", "HEAD~1"], 2),
    "git revert of the top commit": (["revert", "--no-edit", "HEAD"], 2),
    "bisect": (["bisect", "start", "HEAD", "origin/main"], None),
    "rebase stopped at edit": (["-c", "sequence.editor=sed -i 2s/^pick/edit/", "rebase", "-q", "-i", "origin/main"], 2),
}


@pytest.fixture(scope="module")
def three_applied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding patches/ and a checkout with the three patches applied: made once, copied per case."""
    tmp = tmp_path_factory.mktemp("three")
    _three_patches(tmp)
    return tmp


@pytest.mark.parametrize("how", list(LEFT))
def test_a_series_left_part_way(tmp_path: Path, how: str, three_applied: Path) -> None:
    copy = shutil.copytree(three_applied, tmp_path / "copy", symlinks=True)
    base, co = ["--patches", str(copy / "patches")], copy / "checkout"
    args, count = LEFT[how]
    git(co, *args)
    if count is None:  # where bisect stopped: the overlay's commits HEAD holds
        count = len(git(co, "log", "--format=%s", "origin/main..HEAD").splitlines())
    assert _states(base, co) == ["applied"] * count + ["applicable"] * (3 - count)


def test_a_newer_series_that_changed_a_patch(tmp_path: Path) -> None:
    """Its second patch now changes less and says so in its subject (same file): the commit made from the earlier
    version is `applied (older)`, not `already upstream`; revert + apply bring the new version in."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    work = tmp_path / "work"
    write(work, "python/sglang/model.py", edit_line(MODEL_PY, "line 10\n", "line 10 fixed\n"))
    git(work, "commit", "-q", "--amend", "-am", "hook: fix line 5", "-m", "Origin: vendor")
    git(work, "format-patch", "-q", "--full-index", "--start-number", "2", "-o", str(tmp_path / "new"), "HEAD~1..")
    ov.series[1].write_bytes(next((tmp_path / "new").glob("*.patch")).read_bytes())  # same file, new content
    assert _states(base, co) == ["applied", "applied (older)"]
    assert "reverted 2 overlay commit(s)" in cli(*base, "revert", "--checkout", str(co), env=IDENT).stdout
    assert "applied 2 patch(es)" in cli(*base, "apply", "--checkout", str(co)).stdout
    assert _states(base, co) == ["applied", "applied"]
    assert "line 30 fixed" not in (co / "python/sglang/model.py").read_text()
