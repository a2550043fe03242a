"""Commits that are not the tool's, made on the branch it changes while it runs (the user's, or another worktree's
of the same branch): never reset off the branch, and the true state in one line."""

from __future__ import annotations

from pathlib import Path

from synth import IDENT, cli, clone, git, hook, make_overlay, one_error, snapshot

# A pre-applypatch hook that puts a commit of someone else's onto the branch (as a script or another worktree does:
# this worktree's index untouched) while `git am` is between the tool's first and second patch; with `then`, it
# then refuses the second.
MINE = (
    "echo x >> {count}\nif [ $(wc -l < {count}) -eq 2 ]; then "
    "git update-ref refs/heads/main $(git commit-tree HEAD^{{tree}} -p HEAD -m mine); {then}fi\n"
)


def _setup(tmp: Path) -> tuple[list[str], Path]:
    ov = make_overlay(tmp)
    return ["--patches", str(ov.patches)], clone(ov.upstream, tmp / "checkout")


def _subjects(co: Path) -> list[str]:
    return git(co, "log", "--format=%s", "origin/main..HEAD").splitlines()


def test_a_branch_checked_out_in_another_worktree_is_refused(tmp_path: Path) -> None:
    """An apply (or revert) would move the branch under the other worktree's files; two of them at once would each
    commit on the other's commits."""
    base, co = _setup(tmp_path)
    other = tmp_path / "other"
    git(co, "worktree", "add", "-q", "-f", str(other), "main")
    before = (snapshot(co), snapshot(other))
    for command in ("apply", "revert"):
        line = one_error(cli(*base, command, "--checkout", str(co)))
        assert line == (
            f"branch main of {co} is also checked out in {other}: a change here would move it under that worktree's "
            f"files; switch one of them to a branch of its own (`git -C {other} switch -c NAME`), then try again"
        ), line
    assert (snapshot(co), snapshot(other)) == before


def test_a_users_commit_made_while_apply_runs_stays(tmp_path: Path) -> None:
    """The series goes in around it; the user's commit is kept and named; revert then removes only the tool's."""
    base, co = _setup(tmp_path)
    hook(co, "pre-applypatch", MINE.format(count=tmp_path / "count", then=""))
    proc = cli(*base, "apply", "--checkout", str(co), env=IDENT)
    assert proc.returncode == 0 and not proc.stderr, (proc.stdout, proc.stderr)
    mine = git(co, "rev-parse", "HEAD~1")
    assert f"note: commit {mine[:12]} (mine), not sgl-overlay's, went onto branch main while apply ran" in proc.stdout
    assert _subjects(co) == ["hook: fix line 5 and model line 30", "mine", "model: fix line 10"]
    (co / ".git" / "hooks" / "pre-applypatch").unlink()
    assert "reverted 2 overlay commit(s)" in cli(*base, "revert", "--checkout", str(co), env=IDENT).stdout
    assert "mine" in _subjects(co) and git(co, "status", "--porcelain") == ""


def test_a_users_commit_made_while_apply_fails_stays(tmp_path: Path) -> None:
    """The rollback would reset it off the branch: the tool's commit below it stays, and the line says so."""
    base, co = _setup(tmp_path)
    hook(co, "pre-applypatch", MINE.format(count=tmp_path / "count", then="exit 1; "))
    line = one_error(cli(*base, "apply", "--checkout", str(co), env=IDENT))
    mine = git(co, "rev-parse", "HEAD")
    assert _subjects(co) == ["mine", "model: fix line 10"]
    assert f"commit {mine[:12]} (mine), not sgl-overlay's, went onto branch main while apply ran" in line, line
    assert f"`sgl-overlay revert --checkout {co}` removes the overlay's commit(s) below it" in line, line
    assert not (co / ".git" / "rebase-apply").exists() and git(co, "status", "--porcelain") == ""
    (co / ".git" / "hooks" / "pre-applypatch").unlink()
    assert "reverted 1 overlay commit(s)" in cli(*base, "revert", "--checkout", str(co), env=IDENT).stdout
    assert _subjects(co) == ['Revert "model: fix line 10"', "mine", "model: fix line 10"]
