"""Running a command the tool depends on (git, pip, wheel, an interpreter): a failure becomes one
OverlayError line naming what failed and why."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from sgl_overlay.errors import OverlayError


def failure_reason(proc: subprocess.CompletedProcess) -> str:
    """The line that says why a command failed: the last stderr line that is not a `hint:`,
    else the last stdout line, else the exit status."""

    def lines(stream: str | bytes | None) -> list[str]:
        text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    err = [line for line in lines(proc.stderr) if not line.startswith("hint:")]
    return (err or lines(proc.stdout) or [f"exit {proc.returncode}"])[-1]


def run(
    cmd: Sequence[str | Path],
    what: str,
    *,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    cwd: Path | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess:
    """Run `cmd` with its output captured (text unless `input` is bytes); with `check`, a non-zero
    exit raises OverlayError("{what} failed: <reason>"). `env` is added to this process's
    environment; `new_session` shields the command from the terminal's Ctrl-C."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=not isinstance(input, bytes),
        input=input,
        cwd=cwd,
        env={**os.environ, **env} if env else None,
        start_new_session=new_session,
    )
    if check and proc.returncode != 0:
        raise OverlayError(f"{what} failed: {failure_reason(proc)}")
    return proc
