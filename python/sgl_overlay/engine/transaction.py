"""The one way the tool changes a checkout (apply, revert, the matrix's trees), like `git am`
keeps `rebase-apply/`: a lock, then a journal, then git.

- `locked`: `<git dir>/sgl-overlay.lock`, made atomically (O_CREAT|O_EXCL, then a hard link) holding the pid, its
  start time (a pid and its start time name one process: a reused pid is a dead run) and the command; a second
  run names the holder and exits 1.
- `Change`: `<git dir>/sgl-overlay-journal.json`, written before the first git command that
  changes the tree (HEAD before and its branch, the subjects of the commits the run may make, the files and blobs
  it may write); what it has done since, git's history says. A failure or Ctrl-C rolls back to HEAD before and
  removes the journal; a killed run leaves it, every later command names it, and `abort` rolls it back,
  only when the checkout holds nothing but what the run did (as `git am --abort` keeps the user's work).
- `abort` removes the git lock files of the names the run's git takes once no process may hold them: stale, as
  git itself calls a lock whose git is gone.
- git runs in the tool's process group and ends with the tool, removing its locks (see subproc).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from pathlib import Path

from sgl_overlay.engine import gitutil, records, subproc
from sgl_overlay.errors import Interrupted, OverlayError, some

LOCK = "sgl-overlay.lock"
JOURNAL = "sgl-overlay-journal.json"
ZERO = "0" * 40  # a blob id standing for "no file"


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
    alive: records.Alive = records.Alive.YES  # for RUNNING: how sure that it runs

    def line(self) -> str:
        """Another run's lock, a lock whose run is gone, or a killed run's journal."""
        run, repo, path = self.run, self.repo, self.path
        match self.what:
            case Left.RUNNING:
                since = time.strftime("%H:%M:%S", time.localtime(run.get("started") or 0))
                line = f"{repo} is being changed by {who(run)} since {since} (lock {path}); wait for it to finish"
                if self.alive == records.Alive.UNSURE:
                    line += (
                        f"; its record has no start time to tell that run from another process of pid {run['pid']}: "
                        f"if that is not it, remove it with `rm {path}`"
                    )
                elif self.alive == records.Alive.ELSEWHERE:
                    line += (
                        f"; it was written on host {run.get('host')}, where this host cannot see its processes: if "
                        f"no sgl-overlay runs on {repo} there, remove it with `rm {path}`"
                    )
                return line
            case Left.STALE_LOCK:
                return f"stale lock {path} of {who(run)}, which no longer runs; remove it with `{_abort(repo)}`"
        head = str(run.get("head", ""))[:12] or "unknown"
        return (
            f"a killed {who(run)} left {repo} mid-change (journal {path}, HEAD before {head}); "
            f"roll it back with `{_abort(repo)}`"
        )


def who(run: dict) -> str:
    """The run a lock or journal records."""
    return f"`sgl-overlay {run.get('command', '?')}` (pid {run.get('pid', '?')})"


def _abort(repo: Path) -> str:
    return f"sgl-overlay apply --abort --checkout {repo}"


def _writable(repo: Path, reason: str | None) -> str:
    """The next step when the tool cannot write in a checkout's git directory."""
    if reason == os.strerror(errno.ENOSPC):
        return f"free some space on the device {repo} is on, then run again (nothing was changed)"
    return f"{repo} and its .git must be writable to change it (nothing was changed)"


def _ref(ref: str | None, short: bool = False) -> str:
    """A branch (refs/heads/x), a commit, or None (a detached HEAD), as a line names it."""
    if ref is None:
        return "a detached HEAD"
    if ref.startswith("refs/heads/"):
        return ref.removeprefix("refs/heads/") if short else f"branch {ref.removeprefix('refs/heads/')}"
    return ref[:12] if short else f"commit {ref[:12]}"


def _records(repo: Path) -> tuple[Path, dict | None, Path, dict | None]:
    """The lock and the journal of `repo` with their records (None: absent); refuses, in one line, either
    when this version cannot read it exactly."""
    gd = gitutil.git_dir(repo)
    lock, journal = gd / LOCK, gd / JOURNAL
    return lock, records.read_lock(lock, repo), journal, records.read_journal(journal, repo, lock)


def leftover(repo: Path) -> Leftover | None:
    """Another run's lock or a dead run's journal in `repo`, or None."""
    lock, held, journal, info = _records(repo)
    if held is not None and held["pid"] != os.getpid():
        alive = records.alive(held)
        if alive != records.Alive.NO:
            return Leftover(Left.RUNNING, repo, lock, held, alive)
        if info is None:
            return Leftover(Left.STALE_LOCK, repo, lock, held)
    if info is not None:
        alive = records.alive(info)
        if alive != records.Alive.NO:
            return Leftover(Left.RUNNING, repo, journal, info, alive)
        return Leftover(Left.JOURNAL, repo, journal, info)
    return None


def _refuse_leftover(repo: Path, otherwise: str) -> OverlayError:
    """The refusal naming what another run left, or `otherwise` when it went meanwhile."""
    left = leftover(repo)
    return OverlayError(left.line() if left else otherwise)


_LOCK_TRIES = 3


def _link_lock(mine: Path, lock: Path) -> None:
    try:
        os.link(mine, lock)
    except (PermissionError, NotImplementedError):  # a file system without hard links
        with os.fdopen(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), "w") as f:
            f.write(mine.read_text())


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
            json.dump({**records.me(), "command": command, "started": time.time()}, f)
        for attempt in range(_LOCK_TRIES):
            try:
                _link_lock(mine, lock)
                break
            except FileExistsError:
                # A lock that went before it could be read was a run that just ended: try again.
                left = leftover(repo)
                if left:
                    raise OverlayError(left.line()) from None
                if attempt == _LOCK_TRIES - 1:
                    raise OverlayError(f"{lock} appeared and went; try again") from None
    except FileExistsError:
        raise _refuse_leftover(repo, f"{lock} appeared and went; try again") from None
    except OSError as exc:
        raise OverlayError(f"cannot create {lock} ({exc.strerror}); {_writable(repo, exc.strerror)}") from None
    finally:
        with contextlib.suppress(OSError):  # (a read-only file system refuses even to unlink what is not there)
            mine.unlink()
    try:
        dead = leftover(repo)  # we hold the lock: a journal here is a dead run's
        if dead:
            raise OverlayError(dead.line())
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

    def reason(self) -> str:
        if self.hook is None:
            return self.line or "git am failed"
        return f"the {self.hook.name} hook ({self.hook}) refused it" + (
            f": {self.line}" if self.line else " (it printed nothing)"
        )


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


def rollback(repo: Path, orig: str, tip: str | None = None) -> None:
    """Return a tree that was clean at `orig` to exactly that: end a stopped `git am` or `git revert`,
    then drop whatever changed since. Only for changes that are all the run's (the tree was clean before
    it, and `abort` proves nothing else changed since); `tip`: the HEAD found to hold only the run's commits,
    which git moves back only while HEAD is still there (a commit made since is refused, not reset away)."""
    with subproc.held():
        gd = gitutil.git_dir(repo)
        if (gd / "rebase-apply").exists():
            gitutil.git(repo, "am", "--abort", check=False)
        if (gd / "sequencer").exists() or (gd / "REVERT_HEAD").exists():
            gitutil.git(repo, "revert", "--abort", check=False)
            _end_stopped(repo, gd)  # what a `git revert` that could not even abort leaves (an invalid date in its env)
        now = gitutil.head(repo)
        if now != orig and tip is not None:
            moved = gitutil.git(repo, "update-ref", "-m", "sgl-overlay: roll back", "HEAD", orig, tip, check=False)
            if moved.returncode != 0:
                raise OverlayError(
                    f"{repo}: HEAD moved to {now[:12]} while the tool rolled back its change (a commit made "
                    f"meanwhile?): nothing of that was reset; `sgl-overlay apply --abort --checkout {repo}` says "
                    "what is left"
                )
        if now != orig or gitutil.changed_files(repo):
            gitutil.git(repo, "reset", "-q", "--hard", orig)
        shutil.rmtree(gd / "rebase-apply", ignore_errors=True)  # what a killed `git am` could not abort


class Change:
    """The journaled part of a run: on a failure or Ctrl-C, the tree goes back to HEAD before.
    Use inside `locked`. `paths`: the files the run may write; `blobs`: what it may write there besides
    what the commits before and after hold (the patches' `index` blobs)."""

    def __init__(
        self,
        repo: Path,
        command: str,
        subjects: Sequence[str],
        paths: Sequence[str] = (),
        blobs: Sequence[str] = (),
        on_kept: Callable[[list[str]], None] | None = None,
    ):
        self.repo, self.command, self.on_kept = repo, command, on_kept  # on_kept: its commits, when they stay
        self.journal = gitutil.git_dir(repo) / JOURNAL
        self.head = gitutil.head(repo)
        branch = gitutil.git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip()
        self.data = {
            **records.me(),
            "command": command,
            "started": time.time(),
            "head": self.head,
            "branch": branch or None,  # None: a detached HEAD
            "subjects": list(subjects),  # what this run may commit: abort drops only these
            "paths": sorted(set(paths)),
            "blobs": sorted(set(blobs)),
        }

    def __enter__(self) -> Change:
        try:
            records.write(self.journal, self.data)
        except OSError as exc:
            raise OverlayError(
                f"cannot write {self.journal} ({exc.strerror}); {_writable(self.repo, exc.strerror)}"
            ) from None
        return self

    def made(self) -> list[str]:
        """The commits this run made so far, oldest first (not those another made on the branch meanwhile)."""
        others = {sha for sha, _ in foreign_commits(self.repo, self.head, self.data["subjects"])}
        return [
            c for c in gitutil.out(self.repo, "rev-list", "--reverse", f"{self.head}..HEAD").split() if c not in others
        ]

    def kept(self, others: list[tuple[str, str]], exc: BaseException | None) -> OverlayError:
        """The failure of a run that commits of others landed on top of: its own commits stay below them."""
        if self.on_kept is not None:
            self.on_kept(self.made())
        why = str(exc).partition("; tree left unchanged")[0] if isinstance(exc, OverlayError) else "interrupted"
        return OverlayError(
            f"{self.command} did not complete in {self.repo} ({why}), and "
            f"{others_line(self.repo, others, self.data['branch'], self.command)}: nothing was reset, HEAD is "
            f"{gitutil.head(self.repo)[:12]} and the files are as it has them; `sgl-overlay revert --checkout "
            f"{self.repo}` removes the overlay's commit(s) below it"
        )

    def interrupted(self) -> Interrupted:
        return Interrupted(f"interrupted: {self.command} rolled back, {self.repo} is as before (HEAD {self.head[:12]})")

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if typ is None and subproc.caught() is None:
            self.journal.unlink(missing_ok=True)  # the change is complete: a later signal only ends the run
            subproc.hold()
            return False
        with subproc.held():
            tip = gitutil.head(self.repo)
            others = foreign_commits(self.repo, self.head, self.data["subjects"], tip)
            if others:  # a rollback would reset them off the branch: only git's stopped operation ends
                _restore(self.repo, gitutil.git_dir(self.repo), tip, _run_paths(self.repo, self.data))
            else:
                rollback(self.repo, self.head, tip)  # a failure of the rollback keeps the journal for `abort`
            self.journal.unlink(missing_ok=True)
            if others:
                raise self.kept(others, exc) from None
        if subproc.caught() is not None or typ is None or issubclass(typ, KeyboardInterrupt):
            raise self.interrupted() from None  # git may have failed of the same Ctrl-C: the signal is the cause
        return False


def foreign_commits(repo: Path, head: str, subjects: Sequence[str], tip: str = "HEAD") -> list[tuple[str, str]]:
    """(commit, subject) of the commits after `head` up to `tip` that a run which may commit `subjects` did not
    make: the user's, or another worktree's of the same branch, made while it ran. Newest first."""
    log = gitutil.out(repo, "log", "--format=%H %s", f"{head}..{tip}")
    pairs = [line.partition(" ")[::2] for line in log.splitlines()]
    return [(sha, subject) for sha, subject in pairs if subject not in set(subjects)]


def _foreign_commits(repo: Path, info: dict) -> list[str]:
    """Commits after the dead run's HEAD that it did not make (of no subject it may commit), as `sha subject`."""
    return [f"{sha} {subject}" for sha, subject in foreign_commits(repo, info["head"], info["subjects"])]


def others_line(repo: Path, others: list[tuple[str, str]], branch: str | None, command: str) -> str:
    """The commits not the tool's that went onto the branch while `command` ran."""
    sha, subject = others[-1]
    more = f" and {len(others) - 1} more" if len(others) > 1 else ""
    return f"commit {sha[:12]} ({subject[:60]}){more}, not sgl-overlay's, went onto {_ref(branch)} while {command} ran"


def _blobs_of(repo: Path, commits: list[str], paths: set[str]) -> set[str]:
    """The blobs `paths` hold in `commits`."""
    found = set()
    for c in commits:
        entries = gitutil.git(repo, "ls-tree", "-z", c, "--", *sorted(paths)).stdout if paths else ""
        for entry in entries.split("\0"):
            meta = entry.partition("\t")[0].split()
            if len(meta) == 3:
                found.add(meta[2])
    return found


LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}  # the run's paths are file names, not patterns


def _run_paths(repo: Path, info: dict) -> list[str]:
    """The files the run may have written: its patches' (journal), and what its commits changed."""
    made = gitutil.out(repo, "diff", "--name-only", "--no-renames", "-z", info["head"], "HEAD").split("\0")
    return sorted({*info["paths"], *filter(None, made)})


def _changed_since(repo: Path, info: dict, paths: list[str]) -> list[str]:
    """Of the run's files, those whose index entry or working copy is neither what the run started from nor
    anything it could have written (the blobs of HEAD before, of its own commits, of its patches): the
    user's edits since, which a rollback would overwrite. (Other files are the user's alone: kept.)"""
    head = info["head"]
    commits = [head, *gitutil.out(repo, "rev-list", f"{head}..HEAD").split()]
    allowed = _blobs_of(repo, commits, set(paths)) | set(info["blobs"])

    def known(blob: str | None) -> bool:
        return blob is None or blob == ZERO or any(blob.startswith(a) for a in allowed)

    gitutil.git(repo, "update-index", "-q", "--refresh", check=False)  # a touched file is no change
    changed: list[str] = []
    listed = gitutil.git(repo, "ls-files", "-s", "-z", "--", *paths, env=LITERAL).stdout
    for entry in filter(None, listed.split("\0")):
        meta, _, path = entry.partition("\t")
        _mode, blob, stage = meta.split()
        if stage == "0" and not known(blob) and path not in changed:
            changed.append(path)  # (unmerged entries are a stopped `git am -3`'s merge)
    files = [p for p in paths if (repo / p).is_file() and not (repo / p).is_symlink()]
    working = gitutil.worktree_blobs(repo, files)  # through git's filters, as `git diff` compares
    for path in paths:
        if not known(working.get(path)) and path not in changed:
            changed.append(path)
    return changed


def _end_stopped(repo: Path, gd: Path) -> None:
    """End the `git am` or `git revert` the run's git left stopped, HEAD, index and files as they are: git's own
    `revert --quit` (its sequencer, REVERT_HEAD, MERGE_MSG, AUTO_MERGE …) and `rebase-apply/`, however far a killed
    `git am` got in writing it."""
    gitutil.git(repo, "revert", "--quit", check=False)
    shutil.rmtree(gd / "rebase-apply", ignore_errors=True)


def _restore(repo: Path, gd: Path, head: str, paths: list[str]) -> None:
    """Put the branch back at `head` and the run's files back as `head` holds them, in the index and the working
    tree, leaving every other file (the user's edits, staged files) as it is; end git's stopped am or revert."""
    _end_stopped(repo, gd)
    if gitutil.head(repo) != head:
        gitutil.git(repo, "reset", "-q", "--soft", head)
    present = gitutil.git(repo, "ls-tree", "-r", "-z", "--name-only", head, "--", *paths, env=LITERAL).stdout
    kept = [p for p in present.split("\0") if p]
    if kept:
        gitutil.git(repo, "checkout", head, "--", *kept, env=LITERAL)
    for path in sorted(set(paths) - set(kept)):  # files the run added
        gitutil.git(repo, "rm", "-q", "--cached", "--ignore-unmatch", "--", path, env=LITERAL)
        (repo / path).unlink(missing_ok=True)


def _refuse_changes_since(repo: Path, info: dict, journal: Path, lock: Path) -> None:
    """Refuse, in one line, when the checkout holds anything the killed run did not do: another branch or
    HEAD, commits it did not make, files edited or staged since."""
    run, head = who(info), info["head"]
    branch = gitutil.git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None
    if branch != info["branch"]:
        raise _branch_since(repo, run, branch, info["branch"], journal, lock, head)
    ahead = gitutil.git(repo, "merge-base", "--is-ancestor", head, "HEAD", check=False).returncode == 0
    if not ahead and not _reset_by_revert(repo, info):
        raise _branch_since(repo, run, gitutil.head(repo), head, journal, lock, head)
    foreign = _foreign_commits(repo, info)
    if foreign:
        raise OverlayError(
            f"{repo} has commits the killed {run} did not make (first: {foreign[0][:60]}); to keep them, "
            f"`rm {journal} {lock}`; to drop them, `git reset --hard {head[:12]}` there, then abort again"
        )
    files = _changed_since(repo, info, _run_paths(repo, info))
    if files:
        raise OverlayError(
            f"{repo}: {some(files)} changed since the killed {run}, which wrote {'it' if len(files) == 1 else 'them'} "
            "too: nothing was rolled back; to keep your version, copy it aside; then `git checkout HEAD -- "
            f"{' '.join(files)}` there and abort again"
        )


def _reset_by_revert(repo: Path, info: dict) -> bool:
    """HEAD is where the killed revert's `git reset` took it: below HEAD before, by the commits it removed."""
    if info["command"] != "revert":
        return False
    removed = gitutil.git(repo, "log", "--format=%s", f"HEAD..{info['head']}", check=False)
    return removed.returncode == 0 and all(f'Revert "{s}"' in info["subjects"] for s in removed.stdout.splitlines())


def _branch_since(
    repo: Path, run: str, now: str | None, was: str | None, journal: Path, lock: Path, head: str
) -> OverlayError:
    """The refusal of a checkout whose branch or HEAD moved since the killed run."""
    back = _ref(was, short=True) if was else "--detach " + head[:12]
    return OverlayError(
        f"{repo} is on {_ref(now)} now, the killed {run} changed {_ref(was)}: nothing was rolled back; "
        f"to roll it back, `git checkout {back}` there (commit or stash your changes first), then "
        f"abort again; to keep everything as it is, `rm {journal} {lock}`"
    )


# The lock files a run's `git am`, `git revert` or `git reset` takes in the worktree's git directory, and in the
# shared one besides its branch's.
WORKTREE_LOCKS = (
    "index.lock",
    "HEAD.lock",
    "ORIG_HEAD.lock",
    "REBASE_HEAD.lock",
    "AUTO_MERGE.lock",
    "CHERRY_PICK_HEAD.lock",
    "REVERT_HEAD.lock",
    "MERGE_HEAD.lock",
    "MERGE_RR.lock",
)
SHARED_LOCKS = ("packed-refs.lock", "MERGE_RR.lock")


def git_lock_names(repo: Path, branch: str | None) -> list[Path]:
    """Where the run's git takes its locks: the names its commands take (never another worktree's, another ref's
    or a worktree's `locked`)."""
    gd, common = gitutil.git_dir(repo), gitutil.common_dir(repo)
    names = [gd / n for n in WORKTREE_LOCKS] + [common / n for n in SHARED_LOCKS]
    if branch:
        names.append(common / f"{branch}.lock")
    return list(dict.fromkeys(names))


def _stale_git_locks(repo: Path, info: dict) -> list[Path]:
    """git's lock files of the names the killed run's git takes, once no process may hold them: stale, as git
    itself calls a lock whose git is gone (whichever git left it). Refuses, in one line and before anything is
    changed, while a live git may hold one."""
    present = [p for p in git_lock_names(repo, info["branch"]) if p.exists()]
    holders = subproc.processes_in([gitutil.git_dir(repo), gitutil.common_dir(repo)], repo) if present else []
    if holders:
        raise OverlayError(
            f"{present[0]} may be held by pid {holders[0]} (`{subproc.cmdline(holders[0]) or '?'}`), which works in "
            f"{repo}, not by the killed {who(info)}: nothing was changed; let that git finish (or end it), then abort "
            "again"
        )
    return present


def _end_processes(run: str) -> list[int]:
    """End what the killed run left running (a hook git started, a git still ending) and wait until none lives,
    so nothing writes the checkout while it is rolled back: SIGTERM, on which git removes the lock files it
    holds, then SIGKILL for what still runs 10 s later. Returns their pids."""

    def left() -> list[int]:
        return [p for p in subproc.processes_of(run) if p != os.getpid()] if run else []

    pids = living = left()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in living:  # as last listed: a pid that ended may be another process's by now
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while (living := left()) and time.monotonic() < deadline:
            time.sleep(0.02)  # the kernel frees them at once; their parent (init) reaps them
    return pids


@dataclass(frozen=True)
class Aborted:
    """What `apply --abort` did in `repo`: nothing (`run` None), removed the stale `lock` of `run`, or
    rolled the killed `run` back to `head` (`made`: the commits it had made; `locks`: git's stale lock files,
    removed; `ended`: its processes that still ran)."""

    repo: Path
    run: dict | None = None  # the lock's or the journal's record of that run
    lock: Path | None = None
    head: str = ""
    made: tuple[str, ...] = ()
    locks: tuple[Path, ...] = field(default=())
    ended: tuple[int, ...] = ()

    def line(self) -> str:
        if self.run is None:
            return f"nothing to abort in {self.repo}: no sgl-overlay run left a lock or journal there"
        if not self.head:
            return f"removed the stale lock {self.lock} of {who(self.run)}; nothing to roll back in {self.repo}"
        done = f"; it had made commit(s) {', '.join(c[:12] for c in self.made)}" if self.made else ""
        left = [f"git's stale lock file(s) {', '.join(p.name for p in self.locks)}"] if self.locks else []
        left += [f"its process(es) {', '.join(map(str, self.ended))}"] if self.ended else []
        removed = f"; removed what it left: {' and '.join(left)}" if left else ""
        return (
            f"rolled back the killed {who(self.run)} in {self.repo}: HEAD {self.head[:12]} again, as before it "
            f"ran{done}{removed}"
        )


def abort(repo: Path) -> Aborted:
    """Roll back what a killed run left in `repo` (its journal), keeping what the user did since in other files,
    and remove its lock and git's stale locks; refuses, changing nothing, when the branch moved, commits the run did
    not make are on top, one of the run's own files was edited since, or a live git may hold a lock. One abort at a time: a second one while it runs is refused in one line."""
    gd = gitutil.git_dir(repo)
    with _one_abort(gd, repo):
        return _roll_back(repo, gd)


@contextlib.contextmanager
def _one_abort(gd: Path, repo: Path) -> Iterator[None]:
    """Hold the git directory's flock (released when this process ends, however it ends) for one abort."""
    fd = os.open(gd, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OverlayError(
                f"another `sgl-overlay apply --abort` is rolling back {repo} now: nothing was changed; wait for it "
                "to finish (`sgl-overlay status` then says what is left)"
            ) from None
        yield
    finally:
        os.close(fd)


def _roll_back(repo: Path, gd: Path) -> Aborted:
    lock, held, journal, info = _records(repo)
    for record, path in ((held, lock), (info, journal)):
        if record is not None and record["pid"] != os.getpid():
            alive = records.alive(record)
            if alive != records.Alive.NO:
                raise OverlayError(Leftover(Left.RUNNING, repo, path, record, alive).line())
    if info is None and held is None:
        return Aborted(repo)
    if not os.access(gd, os.W_OK) or gitutil.read_only(repo):
        what = f"roll back the killed {who(info)} (journal {journal})" if info else f"remove the stale lock {lock}"
        raise OverlayError(
            f"{repo} is read-only: `--abort` cannot {what} there, and nothing was changed; make the checkout and its "
            f".git writable (a read-only mount: remount it read-write), then run `{_abort(repo)}` again"
        )
    if info is None:
        lock.unlink(missing_ok=True)
        return Aborted(repo, held, lock)
    ended = _end_processes(info["run"])
    locks = _stale_git_locks(repo, info)
    _refuse_changes_since(repo, info, journal, lock)
    made = gitutil.out(repo, "rev-list", "--reverse", f"{info['head']}..HEAD").split()  # all its own, as checked
    with subproc.held():
        for path in locks:
            path.unlink(missing_ok=True)
        _restore(repo, gd, info["head"], _run_paths(repo, info))
        journal.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
    subproc.hold()
    return Aborted(repo, info, lock, info["head"], tuple(made), tuple(locks), tuple(ended))


def discard_leftovers(repo: Path) -> None:
    """For trees the tool owns and resets anyway (the matrix's): drop a dead run's lock and journal."""
    gd = gitutil.git_dir(repo)
    try:
        held = records.read_lock(gd / LOCK, repo)
    except OverlayError:
        held = None  # a tree the tool owns: an unreadable lock is reset with the rest
    if held and records.alive(held) != records.Alive.NO:
        raise _refuse_leftover(repo, f"{gd / LOCK} is held")
    (gd / JOURNAL).unlink(missing_ok=True)
    (gd / LOCK).unlink(missing_ok=True)
