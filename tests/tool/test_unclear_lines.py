"""Lines that named the wrong cause: each now says what is true and the next step."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from sgl_overlay.engine import subproc
from synth import ERROR, TOOL, cli, clone, git, make_overlay, one_error


def test_each_line_names_the_true_cause(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    assert "applied (older)" in cli("status", "--help").stdout
    # `wheels` reads only the cache: no --offline was given
    line = one_error(cli(*base, "--cache", str(tmp_path / "empty"), "wheels", "--out", str(tmp_path / "dist")))
    assert "--offline" not in line and "this command reads only the cache; run `sgl-overlay fetch`" in line, line
    # a .git file pointing nowhere: its gitdir line
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / ".git").write_text("gitdir: /nowhere/.git/worktrees/x\n")
    line = one_error(cli(*base, "status", "--checkout", str(tmp_path / "moved")))
    assert line.startswith(f"{tmp_path / 'moved' / '.git'} says `gitdir: /nowhere/.git/worktrees/x`, which is no git")
    # an output encoding that cannot print the checkout's path: the encoding, not "a file"
    other = clone(ov.upstream, tmp_path / "chéckout")
    line = one_error(cli(*base, "status", "--checkout", str(other), env={"PYTHONIOENCODING": "ascii"}))
    assert line.startswith("cannot print '\\xe9' in the output's encoding ascii"), line
    # a path of other bytes than UTF-8: read and printed as its bytes (it was "no commit yet")
    odd = clone(ov.upstream, tmp_path / os.fsdecode(b"x\xff"))
    proc = subprocess.run([*TOOL, *base, "status", "--checkout", str(odd)], capture_output=True)
    assert proc.returncode == 0 and proc.stdout.startswith(b"sglang in " + os.fsencode(odd) + b":\n"), proc
    # a report that cannot be written after the change completed: it stands, and the line says so
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*TOOL, *base, "apply", "--checkout", str(co)], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert proc.returncode == 1 and proc.stderr.startswith(ERROR + "the change completed and stands"), proc.stderr
    assert len(git(co, "log", "--format=%s", "origin/main..HEAD").splitlines()) == 2


def test_a_program_killed_by_a_signal_is_named_by_it() -> None:
    """(git killed by SIGXFSZ where `ulimit -f` is too small: -25 as an exit code said nothing.)"""
    killed = subprocess.CompletedProcess(["git"], -signal.SIGXFSZ, "", "")
    assert subproc.failure_reason(killed) == "killed by SIGXFSZ (the file size limit: `ulimit -f`)"
