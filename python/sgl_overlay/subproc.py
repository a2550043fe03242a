"""Running a command the tool depends on (git, pip, wheel, an interpreter): a failure becomes one
OverlayError line naming what failed and why.

Every command gets this process's environment without git's repository-local variables
(`GIT_DIR`, `GIT_INDEX_FILE`, ...: the repository is always the one the tool names), and runs in
the tool's process group, killed when the tool dies (Linux), so nothing outlives a killed run."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sgl_overlay.errors import OverlayError, Why

# What `git rev-parse --local-env-vars` prints (git 2.39 to 2.47), plus the variables that
# change which repository git finds or which refs it reads.
GIT_REPO_ENV = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
        "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
        "GIT_NAMESPACE",
        "GIT_QUARANTINE_PATH",
    }
)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without GIT_REPO_ENV (nor GIT_CONFIG_KEY_n/VALUE_n), plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in GIT_REPO_ENV and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    return {**env, **(extra or {})}


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec hook that makes the child get SIGKILL when the tool dies (Linux prctl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the tool died before the prctl
            os._exit(1)

    return hook


_PREEXEC = _die_with_parent()


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
    exit raises OverlayError(Why.FAILED) naming `what` and the reason. `env` is added to the clean environment."""
    argv = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=not isinstance(input, bytes),
            errors=None if isinstance(input, bytes) else "replace",
            input=input,
            cwd=cwd,
            env=clean_env(env),
            preexec_fn=_PREEXEC,
        )
    except FileNotFoundError:
        if os.sep in argv[0]:
            raise OverlayError(Why.NO_PROGRAM, program=argv[0], what=what) from None
        raise OverlayError(Why.NOT_ON_PATH, program=argv[0], what=what) from None
    except OSError as exc:
        raise OverlayError(Why.CANNOT_RUN, program=argv[0], what=what, reason=exc.strerror or str(exc)) from None
    if check and proc.returncode != 0:
        raise OverlayError(Why.FAILED, what=what, reason=failure_reason(proc))
    return proc
