"""Running a command the tool depends on (git, pip, wheel, an interpreter): a failure becomes one
OverlayError line naming what failed and why.

Every command gets this process's environment without git's repository-local variables
(`GIT_DIR`, `GIT_INDEX_FILE`, ...: the repository is always the one the tool names), and runs in
the tool's process group, killed when the tool dies (Linux), so nothing outlives a killed run.

Ctrl-C and SIGTERM only record the signal (`catch_signals`); the tool acts on it between two programs
(`checkpoint`, after every one), never inside a fork or a library call, where Python would drop the
exception: no interrupt is lost, and none stops git half-way. Every program also carries RUN_ENV
naming this run, so a later run can tell whether any process of a killed one still lives."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sgl_overlay.engine.scratch import pid_alive
from sgl_overlay.errors import Interrupted, OverlayError

RUN_ENV = "SGL_OVERLAY_RUN"  # "<pid>-<start time>" of the run that started the program
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_caught: list[int] = []  # signals received, oldest first
_held = 0  # > 0: checkpoints do not raise (a rollback must finish)
_done = 0  # > 0: a change has completed and its report is not out yet: checkpoints do not raise
_completed = False  # a change of this run has completed

# What changes which repository git finds or which refs it reads, besides what git lists as its repository-local
# variables (`git rev-parse --local-env-vars`: GIT_DIR, GIT_INDEX_FILE, GIT_CONFIG_PARAMETERS, ...).
_MORE_GIT_ENV = ("GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_NAMESPACE", "GIT_QUARANTINE_PATH")


@functools.cache
def git_repo_env() -> frozenset[str]:
    """git's repository-local variables as the git on PATH lists them, and _MORE_GIT_ENV."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        listed = subprocess.run(["git", "rev-parse", "--local-env-vars"], capture_output=True, text=True, env=env)
    except OSError:  # no git to run: `gitutil.ensure_git_runs` says so
        return frozenset(_MORE_GIT_ENV)
    return frozenset([*listed.stdout.split(), *_MORE_GIT_ENV])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without git_repo_env() (nor GIT_CONFIG_KEY_n/VALUE_n), plus RUN_ENV and `extra`."""
    drop = git_repo_env()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    return {**env, RUN_ENV: this_run(), **(extra or {})}


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/<pid>/stat field 22); None where it does not run
    or /proc does not say. A pid and its start time name one process: a reused pid has another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: count from the last ')'
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


_RUN: dict[int, str] = {}


def this_run() -> str:
    """This process's RUN_ENV mark: its pid and start time."""
    pid = os.getpid()
    if pid not in _RUN:
        _RUN[pid] = f"{pid}-{start_time(pid) or 0}"
    return _RUN[pid]


def runs(pid: object, started: object) -> bool:
    """The process `pid` that started at `started` (start_time) runs. Without a start time to compare
    (another system, an older record) a live pid counts as running."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    now = start_time(pid)
    if now is not None:
        return not isinstance(started, int) or now == started
    return pid_alive(pid)


def processes_of(run: str) -> list[int]:
    """The live processes started by the run `run` (RUN_ENV) or by its programs: git, its hooks."""
    found = []
    marker = f"{RUN_ENV}={run}".encode()
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            try:
                env = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if marker in env.split(b"\0"):
                found.append(int(name))
    return found


def _record(signum: int, _frame: object) -> None:
    _caught.append(signum)


def catch_signals() -> None:
    """From now on Ctrl-C and SIGTERM are recorded, and raised at the next checkpoint. A signal this process
    was started with ignored stays ignored (a background job of a script: the shell's Ctrl-C is not for it)."""
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _record)


def caught() -> int | None:
    """The first signal received, or None."""
    return _caught[0] if _caught else None


def interruption(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(f"terminated by signal {signum}")


def checkpoint() -> None:
    """Raise the signal received (KeyboardInterrupt for Ctrl-C), unless the caller holds them."""
    if _caught and not _held and not _done:
        raise interruption(_caught[0])


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Checkpoints do not raise in the body (a rollback must finish); the signal stays recorded."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1


def hold() -> None:
    """A change has completed: checkpoints do not raise until `release` (after its report is printed); a
    signal received meanwhile ends the run after that, the change standing."""
    global _done, _completed
    _done, _completed = _done + 1, True


def release() -> None:
    """End the `hold`s so far (their reports are out)."""
    global _done
    _done = 0


def completed() -> bool:
    """A change of this run has completed."""
    return _completed


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook that makes the child get SIGTERM when the tool dies (Linux prctl), with SIGTERM's
    default action even where the tool was started with it ignored: git then removes the lock files it holds,
    as on Ctrl-C, and exits, so a killed tool leaves none of its git's locks. (exec gives the child the default
    actions of the signals the tool handles back.)"""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, set_action = libc.prctl, libc.signal
    except (OSError, AttributeError):
        return None
    set_action.argtypes = [ctypes.c_int, ctypes.c_void_p]  # signal(int, sighandler_t)
    parent = os.getpid()

    def hook() -> None:
        set_action(signal.SIGTERM, None)  # SIG_DFL; an ignored signal stays ignored across exec
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the tool died before the prctl
            os._exit(1)

    return hook


_PREEXEC = _die_with_parent()


_NO_SPACE = os.strerror(28)  # ENOSPC: "No space left on device", as git and pip print it


def failure_reason(proc: subprocess.CompletedProcess) -> str:
    """The line that says why a command failed: the last error line of stderr (pip's `ERROR:`, or
    the `× ` message of its diagnostics, which it follows with context and `note:` guesses), else
    the last stderr line that is not a `hint:` or `note:`, else the last stdout line, else the exit
    status."""

    def lines(stream: str | bytes | None) -> list[str]:
        text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    err = [line for line in lines(proc.stderr) if not line.startswith(("hint:", "note:"))]
    errors = [line.removeprefix("× ") for line in err if line.startswith(("ERROR:", "× "))]
    if proc.returncode < 0:  # killed by a signal: name it (SIGXFSZ: the file size limit, `ulimit -f`)
        sig = signal.Signals(-proc.returncode)
        limit = " (the file size limit: `ulimit -f`)" if sig == signal.SIGXFSZ else ""
        return f"killed by {sig.name}{limit}"
    return (errors or err or lines(proc.stdout) or [f"exit {proc.returncode}"])[-1]


def run(
    cmd: Sequence[str | Path],
    what: str,
    *,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run `cmd` with its output captured (text unless `input` is bytes); with `check`, a non-zero
    exit raises OverlayError naming `what` and the reason. `env` is added to the clean environment."""
    argv = [str(c) for c in cmd]
    text = not isinstance(input, bytes)
    checkpoint()
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            input=input,
            text=text,
            errors="surrogateescape" if text else None,
            cwd=cwd,
            env=clean_env(env),
            preexec_fn=_PREEXEC,
        )
    except FileNotFoundError:
        if os.sep in argv[0]:
            raise OverlayError(f"{argv[0]} does not exist ({what}); pass the path of an existing program") from None
        raise OverlayError(f"{argv[0]} is not on PATH ({what}); install it or add it to PATH") from None
    except OSError as exc:
        raise OverlayError(
            f"cannot run {argv[0]} ({what}): {exc.strerror or exc}; check that it is a working executable"
        ) from None
    checkpoint()
    if proc.returncode != 0 and _NO_SPACE in (proc.stderr if isinstance(proc.stderr, str) else ""):
        raise OverlayError(  # whatever else it says
            f"{what} failed: no space left on the device ({failure_reason(proc)}); free some space where the "
            "checkout and $TMPDIR are, then run again (the tree is as it was)"
        )
    if check and proc.returncode != 0:
        raise OverlayError(f"{what} failed: {failure_reason(proc)}")
    return proc


def cmdline(pid: int) -> str:
    """The command line of `pid`, its arguments joined by spaces ('' where /proc does not say)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def is_overlay(pid: int) -> bool:
    """`pid` runs sgl-overlay (its script or `python -m sgl_overlay`)."""
    return any(name in cmdline(pid) for name in ("sgl-overlay", "sgl_overlay"))


def processes_in(git_dirs: Sequence[Path], worktree: Path) -> list[int]:
    """The live processes but this one that may hold a lock of git's in `git_dirs`: a file there open, or a git
    working in `worktree` (a `git commit -a` waiting for its editor holds index.lock closed)."""
    dirs = [str(f.resolve()) for f in git_dirs]
    tree = str(worktree.resolve())

    def inside(path: str, roots: list[str]) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in roots)

    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            argv0 = os.path.basename(cmdline(pid).split(" ")[0])
            if argv0 in ("git", "git.exe") or argv0.startswith("git-"):
                if inside(os.readlink(f"/proc/{name}/cwd"), [tree, *dirs]):
                    found.append(pid)
                    continue
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if inside(os.readlink(f"/proc/{name}/fd/{fd}"), dirs):
                    found.append(pid)
                    break
    return found
