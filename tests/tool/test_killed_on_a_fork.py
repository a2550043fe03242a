"""A run killed where the checkout's files are not the pinned pre-images (a fork: `git am -3` merges, making blobs
no patch names): `--abort` knows what the killed git wrote and rolls it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth import cli, clone, git, kill_inside_am, make_overlay, snapshot, write


@pytest.mark.parametrize("nth", [1, 2])
def test_apply_killed_inside_a_3way_git_am_is_rolled_back(tmp_path: Path, nth: int) -> None:
    """Killed while the `nth` patch is merged into the index and files, not yet committed."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    for rel in ("python/sglang/model.py", "python/sglang/hook.py"):
        write(co, rel, "# fork\n" + (co / rel).read_text())
    git(co, "commit", "-qam", "fork")
    before = snapshot(co)
    kill_inside_am(tmp_path, co, base, "pre-applypatch", nth)
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed `sgl-overlay apply`"), abort
    assert snapshot(co) == before
