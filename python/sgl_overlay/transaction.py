"""The one way the tool changes a checkout (apply, revert, the matrix's trees), like `git am`
keeps `rebase-apply/`: a lock, then a journal, then git.

- `locked`: `<git dir>/sgl-overlay.lock`, made atomically (O_CREAT|O_EXCL, then a hard link) holding the pid and the
  command; a second run names the holder and exits 1.
- `Change`: `<git dir>/sgl-overlay-journal.json`, written before the first git command that
  changes the tree (HEAD before, targets, the subjects of the commits the run may make, the
  patches done). A failure or Ctrl-C rolls back to HEAD before and removes the journal; a
  killed run leaves it, every later command names it, and `abort` rolls it back.
- git runs in the tool's process group and dies with the tool (see subproc).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.errors import Interrupted, OverlayError, Why
from sgl_overlay.scratch import pid_alive

LOCK = "sgl-overlay.lock"
JOURNAL = "sgl-overlay-journal.json"


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Hold Ctrl-C / SIGTERM until the critical section ends; the caller then rolls back."""
    caught: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _read(path: Path) -> dict | None:
    """A lock or journal's JSON; {} when it is there but unreadable (half-written), None when absent."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically and durably (a kill leaves the old or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tool_runs(pid: int) -> bool:
    """`pid` runs, and is an sgl-overlay (where /proc says what it runs): a reused pid is not the holder."""
    if not pid_alive(pid):
        return False
    try:
        return b"sgl" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


class Left(Enum):
    """What another run left in a checkout."""

    RUNNING = auto()  # its lock: it is changing the checkout now
    STALE_LOCK = auto()  # a lock whose run is gone, with no journal
    JOURNAL = auto()  # a killed run's journal: the checkout is mid-change


@dataclass(frozen=True)
class Leftover:
    what: Left
    repo: Path
    path: Path  # the lock or the journal
    run: dict  # its record of that run (pid, command, started; a journal's head)


def leftover(repo: Path) -> Leftover | None:
    """Another run's lock or a dead run's journal in `repo`, or None."""
    gd = gitutil.git_dir(repo)
    lock, journal = gd / LOCK, gd / JOURNAL
    held, info = _read(lock), _read(journal)
    if held is not None and held.get("pid") != os.getpid():
        pid = held.get("pid")
        if isinstance(pid, int) and _tool_runs(pid):
            return Leftover(Left.RUNNING, repo, lock, held)
        if info is None:
            return Leftover(Left.STALE_LOCK, repo, lock, held)
    if info is not None:
        return Leftover(Left.JOURNAL, repo, journal, info)
    return None


def _refuse_leftover(repo: Path, otherwise: Why, **facts: object) -> OverlayError:
    """The refusal naming what another run left, or `otherwise` when it went meanwhile."""
    left = leftover(repo)
    return OverlayError(Why.LEFTOVER, left=left) if left else OverlayError(otherwise, **facts)


@contextlib.contextmanager
def locked(repo: Path, command: str) -> Iterator[None]:
    """Hold `repo`'s lock for the body; refuses (one line, exit 1) a lock another run holds or a
    journal a killed run left."""
    lock = gitutil.git_dir(repo) / LOCK
    mine = lock.with_name(f"{LOCK}.{os.getpid()}")
    try:
        # Written whole under a private name (O_CREAT|O_EXCL), then linked into place: the link fails
        # when the lock exists, and no reader ever sees a half-written lock.
        fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "command": command, "started": time.time()}, f)
        try:
            os.link(mine, lock)
        except (PermissionError, NotImplementedError):  # a file system without hard links
            with os.fdopen(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), "w") as f:
                f.write(mine.read_text())
    except FileExistsError:
        raise _refuse_leftover(repo, Why.LOCK_RACE, lock=lock) from None
    except OSError as exc:
        raise OverlayError(Why.CANNOT_LOCK, lock=lock, repo=repo, reason=exc.strerror) from None
    finally:
        mine.unlink(missing_ok=True)
    try:
        dead = leftover(repo)  # we hold the lock: a journal here is a dead run's
        if dead:
            raise OverlayError(Why.LEFTOVER, left=dead)
        yield
    finally:
        lock.unlink(missing_ok=True)


def run_am(
    repo: Path, patches: Sequence[Path], laid_out: bool, flags: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """`git am -3` the patches. Laid-out trees get a fixed committer and date (reproducible ids); a
    user's checkout its own identity, or a stand-in if it has none. `flags` map the patches' paths
    to a moved folder (Placement.apply_flags)."""
    args = ["am", "-3", "--quiet", "--keep-non-patch", *flags]
    env: dict[str, str] = {}
    if laid_out:
        args.append("--committer-date-is-author-date")
        env = {k: v for k, v in gitutil.TOOL_IDENTITY.items() if k.startswith("GIT_COMMITTER")}
    elif not gitutil.has_identity(repo):
        env = {"GIT_COMMITTER_NAME": "sgl-overlay", "GIT_COMMITTER_EMAIL": "sgl-overlay@localhost"}
    return gitutil.git(repo, *args, *map(str, patches), check=False, env=env)


@dataclass(frozen=True)
class AmStop:
    """Why `git am` stopped: its line naming the conflict or error ("" when it printed none), or the hook
    that refused the patch (`line`: the hook's last line)."""

    line: str
    hook: Path | None = None


def am_failure(proc: subprocess.CompletedProcess, repo: Path | None = None) -> AmStop:
    """Why a `git am` failed: the line naming the conflict or error, or the hook that refused."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    named = next((ln for ln in lines if "conflict" in ln.lower() or ln.startswith(("error", "fatal"))), None)
    if named is None and repo is not None:
        hooks = [h for h in ("applypatch-msg", "pre-applypatch") if _runs(gitutil.git_path(repo, f"hooks/{h}"))]
        if hooks:
            return AmStop(lines[-1].strip() if lines else "", gitutil.git_path(repo, "hooks/" + hooks[0]))
    return AmStop((named or (lines[-1] if lines else "")).strip())


def _runs(hook: Path) -> bool:
    return hook.is_file() and os.access(hook, os.X_OK)


def stuck_patch(repo: Path, patches: Sequence[Path]) -> str | None:
    """Which patch `git am` stopped on (its `next` counter); None when git does not say."""
    nxt = gitutil.git_dir(repo) / "rebase-apply" / "next"
    try:
        p = patches[int(nxt.read_text()) - 1]
        return f"{p.parent.name}/{p.name}"
    except (OSError, ValueError, IndexError):
        return None


def rollback(repo: Path, orig: str) -> None:
    """Return a tree that was clean at `orig` to exactly that: end a stopped `git am` or `git revert`,
    then drop whatever changed since. Safe only because the tree was clean before the run."""
    gd = gitutil.git_dir(repo)
    if (gd / "rebase-apply").exists():
        gitutil.git(repo, "am", "--abort", check=False)
    if (gd / "sequencer").exists() or (gd / "REVERT_HEAD").exists():
        gitutil.git(repo, "revert", "--abort", check=False)
    if gitutil.head(repo) != orig or gitutil.changed_files(repo):
        gitutil.git(repo, "reset", "-q", "--hard", orig)
    shutil.rmtree(gd / "rebase-apply", ignore_errors=True)  # what a killed `git am` could not abort


class Change:
    """The journaled part of a run: on a failure or Ctrl-C, the tree goes back to HEAD before.
    Use inside `locked`; `caught` lists the signals held while it runs."""

    def __init__(self, repo: Path, command: str, targets: Sequence[str], subjects: Sequence[str]):
        self.repo, self.command = repo, command
        self.journal = gitutil.git_dir(repo) / JOURNAL
        self.head = gitutil.head(repo)
        self.data = {
            "pid": os.getpid(),
            "command": command,
            "started": time.time(),
            "head": self.head,
            "targets": list(targets),
            "subjects": list(subjects),  # what this run may commit: abort drops only these
            "done": [],
        }
        self.caught: list[int] = []
        self._signals = deferred_signals()
        self._settled = False

    def __enter__(self) -> Change:
        self.caught = self._signals.__enter__()
        try:
            _write(self.journal, self.data)
        except OSError as exc:
            self._signals.__exit__(None, None, None)
            raise OverlayError(Why.CANNOT_JOURNAL, journal=self.journal, repo=self.repo, reason=exc.strerror) from None
        return self

    def done(self, what: str) -> None:
        self.data["done"].append(what)
        _write(self.journal, self.data)

    def interrupted(self) -> Interrupted:
        return Interrupted(Why.INTERRUPTED, command=self.command, repo=self.repo, head=self.head)

    def roll_back(self) -> None:
        """Return to HEAD before now and end the journal (the caller reports why)."""
        rollback(self.repo, self.head)
        self.journal.unlink(missing_ok=True)
        self._settled = True

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        try:
            if self._settled:
                return False
            if typ is None and not self.caught:
                self.journal.unlink(missing_ok=True)
                return False
            self.roll_back()  # a failure of the rollback keeps the journal for `abort`
            if typ is None:
                raise self.interrupted()
            return False
        finally:
            self._signals.__exit__(None, None, None)


def _foreign_commits(repo: Path, info: dict) -> list[str]:
    """Commits after the dead run's HEAD that it did not make (subject not among its own)."""
    log = gitutil.out(repo, "log", "--format=%H %s", f"{info['head']}..HEAD")
    allowed = set(info.get("subjects", []))
    return [line for line in log.splitlines() if line.partition(" ")[2] not in allowed]


@dataclass(frozen=True)
class Aborted:
    """What `apply --abort` did in `repo`: nothing (`run` None), removed the stale `lock` of `run`, or
    rolled the killed `run` back to `head` (`done`: what it had done)."""

    repo: Path
    run: dict | None = None  # the lock's or the journal's record of that run
    lock: Path | None = None
    head: str = ""
    done: tuple[str, ...] = ()


def abort(repo: Path) -> Aborted:
    """Roll back what a killed run left in `repo` (its journal) and remove its lock."""
    gd = gitutil.git_dir(repo)
    lock, journal = gd / LOCK, gd / JOURNAL
    held, info = _read(lock), _read(journal)
    if held and isinstance(held.get("pid"), int) and held["pid"] != os.getpid() and _tool_runs(held["pid"]):
        raise _refuse_leftover(repo, Why.LOCK_HELD, lock=lock)
    if info is None:
        if held is None:
            return Aborted(repo)
        lock.unlink(missing_ok=True)
        return Aborted(repo, held, lock)
    if not isinstance(info.get("head"), str):
        raise OverlayError(Why.BAD_JOURNAL, journal=journal, repo=repo, lock=lock)
    foreign = _foreign_commits(repo, info)
    if foreign:
        raise OverlayError(
            Why.FOREIGN_COMMITS, repo=repo, run=info, first=foreign[0], journal=journal, lock=lock, head=info["head"]
        )
    index_lock = gd / "index.lock"  # the killed git's, when made after the run started
    with contextlib.suppress(OSError):
        if index_lock.stat().st_mtime >= float(info.get("started", 0)):
            index_lock.unlink()
    with deferred_signals():
        rollback(repo, info["head"])
        journal.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
    return Aborted(repo, info, lock, info["head"], tuple(info.get("done") or ()))


def discard_leftovers(repo: Path) -> None:
    """For trees the tool owns and resets anyway (the matrix's): drop a dead run's lock and journal."""
    gd = gitutil.git_dir(repo)
    held = _read(gd / LOCK)
    if held and isinstance(held.get("pid"), int) and held["pid"] != os.getpid() and _tool_runs(held["pid"]):
        raise _refuse_leftover(repo, Why.LOCK_HELD, lock=gd / LOCK)
    (gd / JOURNAL).unlink(missing_ok=True)
    (gd / LOCK).unlink(missing_ok=True)
