"""The lock's and the journal's records on disk: written whole, read back exactly or refused, and the run they
name decided by its identity (pid, that pid's start time, host), never by a pid alone."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from enum import Enum, auto
from pathlib import Path

from sgl_overlay.engine import gitutil, subproc
from sgl_overlay.errors import OverlayError

# The records' format. A journal of another format is refused (its fields could mean something else);
# a lock without one is an older version's, whose pid and start still name its run.
VERSION = 2
SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")  # a SHA-1 or SHA-256 object id
_JOURNAL_LISTS = ("subjects", "paths", "blobs")  # (other fields an earlier writer of this format added: unread)


def write(path: Path, data: dict) -> None:
    """Write `data` to `path` atomically and durably (a kill leaves the old or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def me() -> dict:
    """What a lock or journal records of this run: the format, its pid, that pid's start time, the host, its
    RUN_ENV mark."""
    pid = os.getpid()
    return {"version": VERSION, "pid": pid, "start": subproc.start_time(pid), "host": host(), "run": subproc.this_run()}


def host() -> str:
    return socket.gethostname()


def _load(path: Path) -> object | None:
    """The JSON in `path`, None when absent; a file that is not JSON is refused by the caller."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeError) as exc:
        return exc


def _is(value: object, *types: type) -> bool:
    return isinstance(value, types) and not isinstance(value, bool)


def _lock_problem(data: object) -> str:
    """Why `data` is not a lock this version can act on ('' when it is)."""
    if isinstance(data, Exception):
        return "not JSON" if isinstance(data, ValueError) else str(getattr(data, "strerror", None) or data)
    if not isinstance(data, dict):
        return "not a JSON object"
    if not _is(data.get("pid"), int) or data["pid"] <= 0:
        return "no pid"
    if "version" in data and data["version"] != VERSION:
        return f"format {data['version']!r}, this version writes {VERSION}"
    for key, types in (("start", (int,)), ("started", (int, float)), ("host", (str,)), ("command", (str,))):
        if data.get(key) is not None and not _is(data[key], *types):
            return f"its {key} is {data[key]!r}"
    return ""


def _journal_problem(data: object) -> str:
    """Why `data` is not a journal this version wrote ('' when it is): every field there, of its type."""
    problem = _lock_problem(data)
    if problem:
        return problem
    assert isinstance(data, dict)
    if data.get("version") != VERSION:
        return "written by an older version of sgl-overlay (no format)"
    for key, types in (("run", (str,)), ("command", (str,)), ("started", (int, float))):
        if not _is(data.get(key), *types):
            return f"its {key} is {data.get(key)!r}"
    if not (isinstance(data.get("head"), str) and SHA.match(data["head"])):
        return "no HEAD before the run"
    if data.get("branch") is not None and not isinstance(data["branch"], str):
        return f"its branch is {data['branch']!r}"
    for key in _JOURNAL_LISTS:
        value = data.get(key)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"its {key} is {value!r}"
    return ""


def read_lock(path: Path, repo: Path) -> dict | None:
    """The lock's record, None when there is none; one line refusing a lock this version cannot read."""
    data = _load(path)
    if data is None:
        return None
    problem = _lock_problem(data)
    if problem:
        raise OverlayError(
            f"{path} cannot be read exactly by this sgl-overlay ({problem}): nothing was changed; if no sgl-overlay "
            f"runs on {repo}, remove it with `rm {path}`"
        )
    return data  # type: ignore[return-value]


def read_journal(path: Path, repo: Path, lock: Path) -> dict | None:
    """The journal's record, None when there is none; one line refusing (nothing touched) a journal this version
    cannot read exactly, with the manual steps that keep the user's work."""
    data = _load(path)
    if data is None:
        return None
    problem = _journal_problem(data)
    if problem:
        head = data.get("head") if isinstance(data, dict) and isinstance(data.get("head"), str) else None
        head = head if head and SHA.match(head) else None
        paths = data.get("paths") if isinstance(data, dict) else None
        paths = paths if head and isinstance(paths, list) and all(isinstance(p, str) for p in paths) else []
        kept = gitutil.git(repo, "ls-tree", "-z", "--name-only", head, "--", *paths).stdout.split("\0") if paths else []
        added = [p for p in paths if p not in kept and os.path.lexists(repo / p)]
        head = head[:12] if head else "<the commit before the run (git reflog)>"
        files = " ".join(p for p in kept if p) or "<the files the run's patches touch>"
        if added:  # files the run added: not in HEAD before
            files += f"` and `git rm -q --cached --ignore-unmatch -- {' '.join(added)}; rm -f {' '.join(added)}"
        raise OverlayError(
            f"{path} cannot be read exactly by this sgl-overlay ({problem}): nothing was changed; to roll that run "
            f"back keeping your work, in {repo}: `git am --quit` if `git status` says an am is in progress (it keeps "
            f"what you staged, where `--abort` would drop it), then `git reset --keep {head}` (it keeps your "
            f"uncommitted changes and refuses where they touch the run's files), then `git restore --source={head} "
            f"--staged --worktree -- {files}` (the run's files as they were: copy aside your own edits of them "
            f"first), then `rm {path} {lock}`"
        )
    return data  # type: ignore[return-value]


class Alive(Enum):
    """Whether the run a record names is still running."""

    NO = auto()
    YES = auto()
    UNSURE = auto()  # a live pid whose record has no start time: it may be the run
    ELSEWHERE = auto()  # written on another host: this one cannot tell


def _started_epoch(pid: int) -> float | None:
    """When `pid` started, in seconds since the epoch (boot time + its start ticks); None when not known."""
    ticks = subproc.start_time(pid)
    try:
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return None if ticks is None else boot + ticks / os.sysconf("SC_CLK_TCK")


def alive(record: dict) -> Alive:
    """Is the run `record` names another run that still runs? The same host, the same pid *and* the same start
    time: a reused pid is another process. Without a start time (an older version's record), a live pid that
    started after the record was written, or that is no sgl-overlay, is another process too."""
    pid = record["pid"]
    if pid == os.getpid():
        return Alive.NO
    if record.get("host") not in (None, host()):
        return Alive.ELSEWHERE
    start = record.get("start")
    if isinstance(start, int):
        return Alive.YES if subproc.runs(pid, start) else Alive.NO
    if not subproc.runs(pid, None):
        return Alive.NO
    began, written = _started_epoch(pid), record.get("started")
    if began is not None and isinstance(written, int | float) and began > written + 1:
        return Alive.NO  # it started after the record was written: it did not write it
    if not subproc.is_overlay(pid):
        return Alive.NO
    return Alive.UNSURE


# The commits `apply` made in a checkout, each with the patch it was made from, kept beside the objects (shared
# by its worktrees): only these are "applied" and only these does `revert` remove; a commit of the same subject
# the user made or cherry-picked is never taken for one.
COMMITS = "sgl-overlay-commits.json"


def read_commits(common: Path, repo: Path) -> dict[str, str]:
    """Commit -> patch label of the commits `apply` made in `repo` ({} when it made none); one line refusing a
    record this version cannot read."""
    path = common / COMMITS
    data = _load(path)
    if data is None:
        return {}
    made = data.get("commits") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not (isinstance(made, dict) and all(SHA.match(k) and isinstance(v, str) for k, v in made.items())):
        raise OverlayError(
            f"{path} cannot be read exactly by this sgl-overlay: nothing was changed; it lists the commits "
            f"sgl-overlay made in {repo}: restore it, or remove it (`rm {path}`: then no commit there counts as "
            "applied by sgl-overlay, and `revert` removes none)"
        )
    return made


def add_commits(common: Path, repo: Path, made: dict[str, str]) -> None:
    """Add the commits `apply` made to the record, as one change among the worktrees' (an entry is never dropped:
    a commit the tool made stays its own, in whichever worktree holds it)."""
    with open(common / f"{COMMITS}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worktree's apply adding its own at the same time waits
        write(common / COMMITS, {"version": VERSION, "commits": {**read_commits(common, repo), **made}})
