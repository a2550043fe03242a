"""What `apply --abort` and every command do with the lock, the journal and git's own locks: only the killed
run's own work is touched (a live git's lock, another ref's or another worktree's never is; a stale one of the
names the run's git takes is removed), a journal this version cannot read exactly is refused with the manual
steps that keep the user's work, a malformed record is one line with nothing touched, a record's run is decided
by its identity (pid, start time, host), and files under line-ending filters are compared as git compares them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from synth import (
    HOLD,
    cli,
    clone,
    git,
    kill_inside_am,
    make_overlay,
    one_error,
    snapshot,
    wait_for,
    write,
)

LOCK = "sgl-overlay.lock"
COMMANDS = (["apply", "--abort"], ["apply"], ["check"], ["status"], ["revert"])
JOURNAL = "sgl-overlay-journal.json"


def _killed(tmp: Path, hook: str = "post-applypatch", nth: int = 1, clone_args: tuple[str, ...] = ()):
    ov = make_overlay(tmp)
    co = tmp / "checkout"
    git(tmp, "clone", "-q", *clone_args, str(ov.upstream), str(co))
    base = ["--patches", str(ov.patches)]
    head = git(co, "rev-parse", "HEAD")
    kill_inside_am(tmp, co, base, hook, nth)
    return base, co, head


# ----------------------------------------------------------------------------- git's locks that are not the run's


def test_abort_leaves_the_index_lock_of_a_running_git_commit(tmp_path: Path) -> None:
    """After the kill the user runs `git commit -a`, which holds .git/index.lock while its editor is open:
    `--abort` names that lock and the git holding it, and removes nothing; the user's commit then goes in."""
    base, co, head = _killed(tmp_path)
    write(co, "python/pyproject.toml", (co / "python/pyproject.toml").read_text() + "# my edit\n")
    marker = tmp_path / "editing"
    editor = tmp_path / "editor.sh"
    editor.write_text(
        f'#!/bin/sh\ntouch {marker}\nwhile [ ! -e {marker}.release ]; do sleep 0.02; done\necho mine > "$1"\n'
    )
    editor.chmod(0o755)
    commit = subprocess.Popen(
        ["git", "-C", str(co), "commit", "-qa"], env={**os.environ, "GIT_EDITOR": str(editor)}, text=True
    )
    try:
        wait_for(marker)
        assert (co / ".git" / "index.lock").exists()
        before = snapshot(co)
        line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
        assert line.startswith(f"{co / '.git' / 'index.lock'} may be held by pid {commit.pid} (`git "), line
        assert "nothing was changed; let that git finish (or end it), then abort again" in line, line
        assert (co / ".git" / "index.lock").exists()
        assert snapshot(co) == before
    finally:
        (tmp_path / "editing.release").touch()
        commit.wait(timeout=60)
    assert commit.returncode == 0
    assert git(co, "log", "-1", "--format=%s") == "mine"
    assert git(co, "rev-parse", "HEAD") != head


def test_abort_leaves_a_ref_lock_of_a_running_update_ref(tmp_path: Path) -> None:
    """A user's `git update-ref --stdin` transaction holds refs/heads/feature.lock, and the killed run's git left
    index.lock: `--abort` refuses, naming the lock and the live git; both locks stay and the transaction commits."""
    base, co, head = _killed(tmp_path)
    (co / ".git" / "index.lock").write_text("")
    upd = subprocess.Popen(
        ["git", "-C", str(co), "update-ref", "--stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        upd.stdin.write(f"start\nupdate refs/heads/feature {head}\nprepare\n")
        upd.stdin.flush()
        assert upd.stdout.readline().strip() == "start: ok"
        assert upd.stdout.readline().strip() == "prepare: ok"
        assert (co / ".git/refs/heads/feature.lock").exists()
        line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
        assert f"may be held by pid {upd.pid} (`git -C {co} update-ref --stdin`)" in line, line
        assert (co / ".git/refs/heads/feature.lock").exists() and (co / ".git/index.lock").exists()
        upd.stdin.write("commit\n")
        upd.stdin.close()
        assert upd.wait(timeout=60) == 0
    finally:
        if upd.poll() is None:
            upd.kill()
            upd.wait()
    assert git(co, "rev-parse", "refs/heads/feature") == head


def test_abort_leaves_another_worktrees_and_another_refs_locks(tmp_path: Path) -> None:
    """A linked worktree, locked (`git worktree lock`), with an index.lock of its own, and a stale lock of
    another ref: `--abort` in the main checkout rolls the run back and leaves all three as they were."""
    base, co, head = _killed(tmp_path)
    if (co / ".git" / "rebase-apply").exists():
        git(co, "am", "--abort")
    git(co, "worktree", "add", "-q", str(tmp_path / "linked"), "-b", "linked", head)
    git(co, "worktree", "lock", "--reason", "on a USB disk", str(tmp_path / "linked"))
    theirs = [
        co / ".git/worktrees/linked/locked",
        co / ".git/worktrees/linked/index.lock",
        co / ".git/refs/heads/x.lock",
    ]
    theirs[1].write_text("")
    theirs[2].write_text("")
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), abort
    assert all(p.exists() for p in theirs), [p for p in theirs if not p.exists()]
    assert (co / ".git/worktrees/linked/locked").read_text().strip() == "on a USB disk"
    assert git(co, "rev-parse", "HEAD") == head


def _git_killed_holding(co: Path, tmp: Path, lock: str) -> Path:
    """The user's own git, after the run was killed, takes `lock` and is SIGKILLed in turn (a crash, a closed
    terminal): `git commit -a` waiting for its editor holds index.lock, an `update-ref --stdin` transaction
    the branch's ref lock. Its lock stays, newer than the run, and no process holds it."""
    path = co / ".git" / lock
    if lock == "index.lock":
        write(co, "python/pyproject.toml", (co / "python/pyproject.toml").read_text() + "# my edit\n")
        marker = tmp / "editing"
        editor = tmp / "editor.sh"
        editor.write_text(f"#!/bin/sh\n{HOLD.format(marker=marker)}")
        editor.chmod(0o755)
        user = subprocess.Popen(["git", "-C", str(co), "commit", "-qa"], env={**os.environ, "GIT_EDITOR": str(editor)})
        wait_for(marker)
    else:
        head = git(co, "rev-parse", "HEAD")
        user = subprocess.Popen(["git", "-C", str(co), "update-ref", "--stdin"], stdin=subprocess.PIPE, text=True)
        user.stdin.write(f"start\nupdate refs/heads/main {head}\nprepare\n")
        user.stdin.flush()
        deadline = time.monotonic() + 60
        while not path.exists():
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.01)
    os.kill(user.pid, signal.SIGKILL)
    user.wait(timeout=60)
    (tmp / "editing.release").touch()  # the editor, if any, ends
    assert path.exists()
    return path


@pytest.mark.parametrize("lock", ["index.lock", "refs/heads/main.lock"])
def test_abort_removes_a_stale_git_lock_and_keeps_the_users_work(tmp_path: Path, lock: str) -> None:
    """After the kill, the user's own git takes a lock and is killed in turn: no process holds the lock, so it is
    stale, whoever made it. `--abort` removes it and names it, rolls the run back, and the user's edit stays."""
    base, co, head = _killed(tmp_path)
    theirs = _git_killed_holding(co, tmp_path, lock)
    mine = (co / "python/pyproject.toml").read_text()
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), abort
    names = "index.lock" if lock == "index.lock" else "HEAD.lock, main.lock"  # the transaction locked HEAD too
    assert f"removed what it left: git's stale lock file(s) {names}" in abort.stdout, abort.stdout
    assert not theirs.exists() and not (co / ".git" / "HEAD.lock").exists()
    assert git(co, "rev-parse", "HEAD") == head and (co / "python/pyproject.toml").read_text() == mine


# ----------------------------------------------------------------------------- journals this version cannot read


def test_an_older_versions_journal_is_refused_with_steps_that_keep_the_users_work(tmp_path: Path) -> None:
    """A journal without this version's format (an older sgl-overlay's): `--abort` refuses in one line naming it and
    the manual steps, touching nothing; those steps roll the run back and keep the user's edit."""
    base, co, head = _killed(tmp_path, "pre-applypatch", 1)
    journal = co / ".git" / JOURNAL
    data = json.loads(journal.read_text())
    for key in ("version", "host"):
        del data[key]
    journal.write_text(json.dumps(data))
    write(co, "python/pyproject.toml", (co / "python/pyproject.toml").read_text() + "# my edit\n")
    write(co, "notes.txt", "mine\n")
    git(co, "add", "notes.txt")  # staged after the kill: the steps keep it
    before = snapshot(co)
    for args in COMMANDS:
        line = _refusal(cli(*base, *args, "--checkout", str(co)), args)
        assert line.startswith(f"{journal} cannot be read exactly by this sgl-overlay (written by an older version"), (
            line
        )
        assert f"`git reset --keep {head[:12]}`" in line and f"`rm {journal} {co / '.git' / LOCK}`" in line, line
        assert snapshot(co) == before
    if (co / ".git" / "rebase-apply").exists():
        git(co, "am", "--quit")
    git(co, "reset", "-q", "--keep", head)
    restore = line.split("`git restore ")[1].split("`")[0].split()
    git(co, "restore", *restore)
    if "`git rm -q --cached" in line:  # the files the run added
        added = line.split("`git rm -q --cached --ignore-unmatch -- ")[1].split(";")[0].split()
        git(co, "rm", "-q", "--cached", "--ignore-unmatch", "--", *added)
        for rel in added:
            (co / rel).unlink()
    journal.unlink()
    (co / ".git" / LOCK).unlink(missing_ok=True)
    assert (co / "python/pyproject.toml").read_text().endswith("# my edit\n")
    assert git(co, "rev-parse", "HEAD") == head
    assert git(co, "status", "--porcelain").splitlines() == ["M python/pyproject.toml", "?? notes.txt"]  # (stripped)
    assert (co / "notes.txt").read_text() == "mine\n"  # (`git am --abort` would have deleted it)


def _refusal(proc: subprocess.CompletedProcess, args: list[str]) -> str:
    """The one line a command refuses with: `check` says it as what apply would do."""
    if args == ["check"]:
        lines = proc.stdout.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("would fail: "), proc
        return lines[0].removeprefix("would fail: ")
    return one_error(proc)


def _journal_of(co: Path, **change: object) -> str:
    data = json.loads((co / ".git" / JOURNAL).read_text())
    data.update(change)
    return json.dumps(data)


MALFORMED_JOURNALS = {
    "truncated": lambda co: (co / ".git" / JOURNAL).read_text()[:40],
    "a list": lambda co: "[]",
    "paths is a number": lambda co: _journal_of(co, paths=5),
    "started is a word": lambda co: _journal_of(co, started="noon"),
    "subjects is null": lambda co: _journal_of(co, subjects=None),
    "pid is a word": lambda co: _journal_of(co, pid="x"),
    "head is short": lambda co: _journal_of(co, head="abc"),
    "not UTF-8": lambda co: "\udcff",
}


@pytest.fixture(scope="module")
def killed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding patches/ and a checkout whose apply was killed inside `git am`: made once, copied by each
    case that only reads its journal."""
    tmp = tmp_path_factory.mktemp("killed")
    _killed(tmp)
    return tmp


@pytest.mark.parametrize("kind", list(MALFORMED_JOURNALS))
def test_a_malformed_journal_is_one_line_and_nothing_touched(tmp_path: Path, kind: str, killed_once: Path) -> None:
    copy = shutil.copytree(killed_once, tmp_path / "copy", symlinks=True)
    base, co = ["--patches", str(copy / "patches")], copy / "checkout"
    journal = co / ".git" / JOURNAL
    text = MALFORMED_JOURNALS[kind](co)
    journal.write_bytes(text.encode(errors="surrogateescape"))
    before = snapshot(co)
    for args in COMMANDS:
        line = _refusal(cli(*base, *args, "--checkout", str(co)), args)
        assert line.startswith(f"{journal} cannot be read exactly by this sgl-overlay ("), (args, line)
        assert snapshot(co) == before


MALFORMED_LOCKS = {
    "truncated": '{"pid": 12',
    "a number": "7",
    "pid is a word": '{"pid": "x", "command": "apply", "started": 0}',
    "started is a word": '{"pid": 1, "command": "apply", "started": "noon"}',
    "another format": '{"version": 99, "pid": 1, "command": "apply", "started": 0}',
}


@pytest.mark.parametrize("kind", list(MALFORMED_LOCKS))
def test_a_malformed_lock_is_one_line_and_nothing_touched(tmp_path: Path, kind: str) -> None:
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    lock = co / ".git" / LOCK
    lock.write_text(MALFORMED_LOCKS[kind])
    before = snapshot(co)
    for args in COMMANDS:
        line = _refusal(cli(*base, *args, "--checkout", str(co)), args)
        assert line.startswith(f"{lock} cannot be read exactly by this sgl-overlay ("), (args, line)
        assert line.endswith(f"if no sgl-overlay runs on {co}, remove it with `rm {lock}`"), line
        assert snapshot(co) == before and lock.read_text() == MALFORMED_LOCKS[kind]


# ----------------------------------------------------------------------------- a record's run, by identity


def _stranger(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", "sleep 60", *argv])


def test_a_lock_without_start_time_whose_pid_started_later_is_stale(tmp_path: Path) -> None:
    """An older version's lock (no start time) whose pid now names a process started after it was written: the
    run is gone; status calls the lock stale and `--abort` removes it, the process left alone."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    stranger = _stranger("sgl-overlay apply")
    lock = co / ".git" / LOCK
    lock.write_text(json.dumps({"pid": stranger.pid, "command": "apply", "started": time.time() - 3600}))
    try:
        status = cli(*base, "status", "--checkout", str(co))
        assert status.stdout.startswith(f"note: stale lock {lock} of `sgl-overlay apply` (pid {stranger.pid})"), status
        abort = cli(*base, "apply", "--abort", "--checkout", str(co))
        assert abort.returncode == 0 and abort.stdout.startswith(f"removed the stale lock {lock}"), abort
        assert not lock.exists() and stranger.poll() is None
        assert cli(*base, "apply", "--checkout", str(co)).stdout.startswith("applied 2 patch(es)")
    finally:
        stranger.kill()
        stranger.wait()


def test_a_lock_without_any_time_whose_pid_is_no_sgl_overlay_is_stale(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    stranger = _stranger()
    (co / ".git" / LOCK).write_text(json.dumps({"pid": stranger.pid, "command": "apply"}))
    try:
        applied = cli(*base, "apply", "--checkout", str(co))
        assert applied.returncode == 1 and "stale lock" in applied.stderr, applied
        assert cli(*base, "apply", "--abort", "--checkout", str(co)).returncode == 0
        assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    finally:
        stranger.kill()
        stranger.wait()


def test_a_lock_that_may_be_a_live_run_says_how_to_clear_it(tmp_path: Path) -> None:
    """No start time, and the pid is an sgl-overlay process that started before the lock was written: it may be
    the run, so the checkout is busy; the line says how to clear the lock if it is not. Another host's lock says
    this host cannot tell."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    lock = co / ".git" / LOCK
    stranger = _stranger("sgl-overlay apply")
    try:
        time.sleep(0.05)
        lock.write_text(json.dumps({"pid": stranger.pid, "command": "apply", "started": time.time() + 2}))
        line = one_error(cli(*base, "apply", "--checkout", str(co)))
        assert f"is being changed by `sgl-overlay apply` (pid {stranger.pid})" in line, line
        assert line.endswith(f"if that is not it, remove it with `rm {lock}`"), line
        lock.write_text(json.dumps({"version": 2, "pid": 1, "start": 1, "host": "elsewhere", "command": "apply"}))
        assert socket.gethostname() != "elsewhere"
        line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
        assert "written on host elsewhere" in line and line.endswith(f"remove it with `rm {lock}`"), line
        assert lock.exists()
    finally:
        stranger.kill()
        stranger.wait()


# ----------------------------------------------------------------------------- line-ending filters


@pytest.mark.parametrize("how", ["core.autocrlf", "eol=crlf"])
def test_abort_compares_files_as_git_does_under_line_ending_filters(tmp_path: Path, how: str) -> None:
    """A checkout whose working files have CRLF line ends (core.autocrlf=true, or `* text eol=crlf` in
    .git/info/attributes), killed mid-apply: nothing changed since, so `--abort` rolls back (no "changed since")."""
    clone_args = ("-c", "core.autocrlf=true") if how == "core.autocrlf" else ()
    ov = make_overlay(tmp_path)
    co = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", "--no-checkout", *clone_args, str(ov.upstream), str(co))
    if how == "eol=crlf":
        (co / ".git" / "info" / "attributes").write_text("* text eol=crlf\n")
    git(co, "checkout", "-q", "main")
    assert b"\r\n" in (co / "python/sglang/hook.py").read_bytes()
    base = ["--patches", str(ov.patches)]
    head = git(co, "rev-parse", "HEAD")
    kill_inside_am(tmp_path, co, base, "post-applypatch", 1)
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), abort
    assert git(co, "rev-parse", "HEAD") == head and git(co, "status", "--porcelain") == ""


# ----------------------------------------------------------------------------- commits the tool made


def test_a_users_cherry_pick_of_a_patch_is_never_applied_nor_reverted(tmp_path: Path) -> None:
    """The user takes the first patch as their own commit (`git am` by hand: same subject), then the tool applies
    the rest: status calls only the tool's commit applied, and `revert` removes it alone, the user's commit kept."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    git(co, "am", "-q", str(ov.series[0]))
    mine = git(co, "rev-parse", "HEAD")
    status = cli(*base, "status", "--checkout", str(co)).stdout.splitlines()
    first = next(ln for ln in status if ov.series[0].name in ln)
    assert first.split()[:3] == ["in", "(other", "commit)"], status
    assert f"commit {mine[:12]}, not one sgl-overlay made: `revert` leaves it" in first, first
    before = snapshot(co)
    revert = cli(*base, "revert", "--checkout", str(co))
    assert revert.returncode == 0 and revert.stdout.startswith("nothing to revert"), revert
    assert snapshot(co) == before
    applied = cli(*base, "apply", "--checkout", str(co))
    assert applied.stdout.startswith("applied 1 patch(es)"), applied
    status = cli(*base, "status", "--checkout", str(co)).stdout.splitlines()
    assert next(ln for ln in status if ov.series[1].name in ln).split()[0] == "applied", status
    revert = cli(*base, "revert", "--checkout", str(co))
    assert revert.returncode == 0 and revert.stdout.startswith("reverted 1 overlay commit(s)"), revert
    assert git(co, "rev-parse", "HEAD") == mine


def test_an_unreadable_record_of_the_tools_commits_is_one_line(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    record = co / ".git" / "sgl-overlay-commits.json"
    record.write_text('{"version": 2, "commits": {"abc": 1}}')
    before = snapshot(co)
    line = one_error(cli(*base, "revert", "--checkout", str(co)))
    assert line.startswith(f"{record} cannot be read exactly by this sgl-overlay: nothing was changed"), line
    assert snapshot(co) == before
