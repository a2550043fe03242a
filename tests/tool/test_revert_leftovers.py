"""What `revert` leaves behind and what it says when nothing of the tool's is there to revert: a failed `git revert`
leaves no sequencer; two worktrees whose applies made the same commits keep both recorded; a SHA-256 repository;
an applied branch rebased or cloned elsewhere names the way out; one abort at a time."""

from __future__ import annotations

import fcntl
import os
import signal
import tarfile
from pathlib import Path

import pytest

from synth import (
    IDENT,
    PARK,
    cli,
    clone,
    git,
    hook,
    kill_inside_am,
    make_overlay,
    one_error,
    snapshot,
    spawn,
    wait_for,
    write,
)

DATE = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _setup(tmp: Path) -> tuple[list[str], Path]:
    ov = make_overlay(tmp)
    return ["--patches", str(ov.patches)], clone(ov.upstream, tmp / "checkout")


def _commit_on_top(co: Path) -> None:
    write(co, "notes.txt", "mine\n")
    git(co, "add", "notes.txt")
    git(co, "commit", "-qm", "my own work")


def test_a_failed_git_revert_leaves_no_sequencer(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    _commit_on_top(co)  # revert goes through `git revert`
    head = git(co, "rev-parse", "HEAD")
    line = one_error(cli(*base, "revert", "--checkout", str(co), env={**IDENT, "GIT_COMMITTER_DATE": "garbage"}))
    assert "invalid date format: garbage; tree left unchanged" in line, line
    assert git(co, "rev-parse", "HEAD") == head and git(co, "status", "--porcelain") == ""
    assert not (co / ".git" / "sequencer").exists()
    assert "reverted 2 overlay commit(s)" in cli(*base, "revert", "--checkout", str(co), env=IDENT).stdout


def test_two_worktrees_that_made_the_same_commits_keep_them(tmp_path: Path) -> None:
    """Applied in the same second on the same commit, two worktrees make the very same commits: a revert in one
    leaves them the tool's in the other."""
    base, co = _setup(tmp_path)
    other = tmp_path / "other"
    git(co, "worktree", "add", "-q", "-b", "other", str(other))
    for where in (co, other):
        assert cli(*base, "apply", "--checkout", str(where), env=DATE).returncode == 0
    assert git(co, "rev-parse", "HEAD") == git(other, "rev-parse", "HEAD")
    assert "(reset)" in cli(*base, "revert", "--checkout", str(co)).stdout
    status = cli(*base, "status", "--checkout", str(other)).stdout
    assert [line.split()[0] for line in status.splitlines()[1:]] == ["applied", "applied"], status


def test_a_sha256_repository(tmp_path: Path) -> None:
    """The same files committed in a repository of SHA-256 object ids: apply, status and revert as in any other."""
    base, co = _setup(tmp_path)
    sha256 = tmp_path / "sha256"
    git(tmp_path, "init", "-q", "--object-format=sha256", "-b", "main", str(sha256))
    git(co, "archive", "--format=tar", "-o", str(tmp_path / "files.tar"), "HEAD")
    with tarfile.open(tmp_path / "files.tar") as tar:
        tar.extractall(sha256, filter="data")
    git(sha256, "add", "-A")
    git(sha256, "commit", "-qm", "upstream")
    for command, want in (("apply", "applied 2 patch(es)"), ("status", "applied"), ("revert", "(reset)")):
        proc = cli(*base, command, "--checkout", str(sha256))
        assert proc.returncode == 0 and want in proc.stdout, (command, proc.stdout, proc.stderr)


def test_a_rebased_applied_branch_names_the_way_out(tmp_path: Path) -> None:
    """Its commits are new ones the tool did not make: revert removes none, and says which they are and how."""
    base, co = _setup(tmp_path)
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    git(co, "rebase", "-q", "--force-rebase", "origin/main")
    first, second = git(co, "log", "--format=%H", "origin/main..HEAD").splitlines()[::-1]
    out = cli(*base, "revert", "--checkout", str(co)).stdout
    assert out.startswith(f"nothing to revert: no overlay patch is applied in {co}"), out
    assert (
        f"the commits that hold them ({first[:12]}, {second[:12]}) are not ones sgl-overlay made here (a rebase or "
        f"a clone makes new ones): remove them with `git -C {co} revert --no-edit {second[:12]} {first[:12]}`"
    ) in out, out


def test_a_second_abort_while_one_runs_is_refused(tmp_path: Path) -> None:
    """(A running abort holds the git directory's flock: here the test holds it.) The second changes nothing and
    does not write the journal back; once the first is done, abort rolls the killed run back."""
    base, co = _setup(tmp_path)
    before = snapshot(co)
    kill_inside_am(tmp_path, co, base, "post-applypatch", 1)
    journal = (co / ".git" / "sgl-overlay-journal.json").read_bytes()
    fd = os.open(co / ".git", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
    finally:
        os.close(fd)
    assert line == (
        f"another `sgl-overlay apply --abort` is rolling back {co} now: nothing was changed; wait for it to finish "
        "(`sgl-overlay status` then says what is left)"
    )
    assert (co / ".git" / "sgl-overlay-journal.json").read_bytes() == journal
    assert "rolled back the killed" in cli(*base, "apply", "--abort", "--checkout", str(co)).stdout
    assert snapshot(co) == before


@pytest.mark.parametrize("state", ["prepared", "committed"])
def test_a_revert_killed_inside_its_git_reset_is_rolled_back(tmp_path: Path, state: str) -> None:
    """SIGKILL while `git reset` moves HEAD (its reference-transaction hook holds it): the files it wrote before
    (`prepared`), or HEAD already below the overlay's commits (`committed`), are the run's: --abort rolls back.
    (The checkout's files are not the pinned pre-images, as in a fork: what the reset writes is no blob the
    patches name.)"""
    base, co = _setup(tmp_path)
    for rel in ("python/sglang/model.py", "python/sglang/hook.py"):
        write(co, rel, "# fork\n" + (co / rel).read_text())
    git(co, "commit", "-qam", "fork")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    applied = snapshot(co)
    marker = tmp_path / "parked"
    hook(co, "reference-transaction", f'cat >/dev/null\nif [ "$1" = {state} ]; then\n{PARK.format(marker=marker)}fi\n')
    proc = spawn(*base, "revert", "--checkout", str(co))
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))  # git, ended with the tool, is gone
    (co / ".git" / "hooks" / "reference-transaction").unlink()
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed `sgl-overlay revert`"), abort
    assert snapshot(co) == applied
