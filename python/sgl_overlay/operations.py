"""apply / check / revert: all-or-nothing changes to a checkout through `git am -3`."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.checkout import Checkout, ensure_writable
from sgl_overlay.errors import OverlayError
from sgl_overlay.series import PatchStatus, State, series_status
from sgl_overlay.tree import check_preimages

INTERRUPTED_EXIT = 130


class Interrupted(OverlayError):
    exit_code = INTERRUPTED_EXIT


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


def rollback(repo: Path, orig: str) -> None:
    """Return the tree to `orig`: abort a stopped `git am`, then drop commits made since."""
    if gitutil.operation_in_progress(repo):
        gitutil.git(repo, "am", "--abort", check=False, new_session=True)
    if gitutil.head(repo) != orig or gitutil.dirty_files(repo):
        # Safe: the tree was clean before we started, so only our own changes go.
        gitutil.git(repo, "reset", "-q", "--hard", orig, new_session=True)


def run_am(repo: Path, patches: list[Path], embedded: bool) -> subprocess.CompletedProcess:
    """`git am -3` the patches, shielded from Ctrl-C. Laid-out trees get a fixed committer and
    date (reproducible ids); a user's checkout its own identity, or a stand-in if it has none."""
    flags: list[str] = []
    env: dict[str, str] = {}
    if embedded:
        flags = ["--committer-date-is-author-date"]
        env = {k: v for k, v in gitutil.TOOL_IDENTITY.items() if k.startswith("GIT_COMMITTER")}
    elif not gitutil.has_identity(repo):
        env = {"GIT_COMMITTER_NAME": "sgl-overlay", "GIT_COMMITTER_EMAIL": "sgl-overlay@localhost"}
    return gitutil.git(
        repo, "am", "-3", "--quiet", "--keep-non-patch", *flags, *map(str, patches),
        check=False, env=env, new_session=True,
    )


def statuses(co: Checkout) -> dict[str, list[PatchStatus]]:
    return {t.name: series_status(co.path, t) for t in co.targets}


def preimage_warnings(co: Checkout, st: dict[str, list[PatchStatus]]) -> list[str]:
    """Blob mismatches of pinned pre-images, for targets none of whose patches is applied yet."""
    lines = []
    for target in co.targets:
        if any(s.state == State.APPLIED for s in st[target.name]):
            continue
        for problem in check_preimages(co.path, "HEAD", target):
            if problem.found is not None:  # a missing file is reported as ABSENT by the series
                lines.append(f"{target.name}: pre-image differs: {problem}")
    return lines


def plan(co: Checkout, strict: bool) -> tuple[list[Path], dict[str, list[PatchStatus]], list[str]]:
    """Decide which patch files to apply; refuse (tree untouched) what cannot go all the way."""
    st = statuses(co)
    warnings = preimage_warnings(co, st)
    if strict and warnings:
        raise OverlayError(f"{warnings[0]} (--strict); use the pinned upstream version or drop --strict")
    to_apply: list[Path] = []
    for name, rows in st.items():
        applied = [r for r in rows if r.state == State.APPLIED]
        pending = [r for r in rows if r.state in (State.APPLICABLE, State.APPLICABLE_3WAY)]
        for r in rows:
            if r.state == State.ABSENT:
                raise OverlayError(
                    f"{r.patch.label}: missing file {r.detail} in {co.path}; this checkout is not a "
                    f"version the {name} patches support (see `sgl-overlay status`)"
                )
            if r.state == State.CONFLICTING:
                raise OverlayError(
                    f"{r.patch.label} conflicts in {co.path}: {r.detail}; tree left unchanged "
                    "(see `sgl-overlay status`)"
                )
        if applied and pending:
            raise OverlayError(
                f"half-applied series: {len(applied)} of {len(rows)} {name} patches are applied in "
                f"{co.path} ({applied[0].patch.label}); run `sgl-overlay revert` there, then apply again"
            )
        to_apply += [r.patch.path for r in pending]
    return to_apply, st, warnings


def check(co: Checkout, strict: bool = False) -> tuple[list[Path], dict[str, list[PatchStatus]], list[str]]:
    """What `apply` would do, refusing exactly what `apply` refuses (the dry run of `check`)."""
    ensure_writable(co)
    return plan(co, strict)


def am_failure(proc: subprocess.CompletedProcess) -> str:
    """The line of a failed `git am` that names the conflict or error."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    fallback = lines[-1] if lines else "git am failed"
    return next((l for l in lines if "conflict" in l.lower() or l.startswith("error")), fallback).strip()


def apply(co: Checkout, strict: bool = False) -> list[str]:
    """Apply every pending patch of every target in one `git am -3`, or nothing at all."""
    to_apply, st, warnings = check(co, strict)
    report = [f"warning: {w} (continuing; --strict refuses)" for w in warnings]
    if not to_apply:
        total = sum(len(rows) for rows in st.values())
        return report + [f"already applied: {total} patch(es) in {co.path}; nothing to do"]
    orig = gitutil.head(co.path)
    with deferred_signals() as caught:
        proc = run_am(co.path, to_apply, co.embedded)
        if proc.returncode != 0 or caught:
            stuck = _stuck_patch(co.path, to_apply)
            rollback(co.path, orig)
            if caught:
                raise Interrupted(f"interrupted: apply rolled back, {co.path} is as before (HEAD {orig[:12]})")
            raise OverlayError(
                f"{stuck} did not apply in {co.path}: {am_failure(proc)}; tree left unchanged "
                "(see `sgl-overlay status`)"
            )
    report.append(f"applied {len(to_apply)} patch(es) to {co.path}: {orig[:12]} -> {gitutil.head(co.path)[:12]}")
    return report


def _stuck_patch(repo: Path, to_apply: list[Path]) -> str:
    """Which patch `git am` stopped on (its `next` counter), for the error message."""
    nxt = gitutil.git_dir(repo) / "rebase-apply" / "next"
    try:
        p = to_apply[int(nxt.read_text()) - 1]
        return f"{p.parent.name}/{p.name}"
    except (OSError, ValueError, IndexError):
        return "the series"


def revert(co: Checkout) -> list[str]:
    """Remove exactly the overlay's commits: reset if they are on top, `git revert` otherwise."""
    ensure_writable(co)
    st = statuses(co)
    commits = [r.commit for rows in st.values() for r in rows if r.state == State.APPLIED]
    if not commits:
        return [f"nothing to revert: no overlay commit in {co.path}"]
    orig = gitutil.head(co.path)
    top = gitutil.out(co.path, "rev-list", f"-n{len(commits)}", "HEAD").splitlines()
    with deferred_signals() as caught:
        if set(top) == set(commits):
            gitutil.git(co.path, "reset", "-q", "--hard", f"HEAD~{len(commits)}", new_session=True)
            how = "reset"
        else:
            ordered = [c for c in gitutil.out(co.path, "rev-list", "HEAD").splitlines() if c in set(commits)]
            proc = gitutil.git(co.path, "revert", "--no-edit", *ordered, check=False, new_session=True)
            if proc.returncode != 0:
                gitutil.git(co.path, "revert", "--abort", check=False, new_session=True)
                rollback(co.path, orig)
                raise OverlayError(
                    f"could not revert the overlay's commits in {co.path} (later commits touch the same "
                    "lines); tree left unchanged: revert them by hand with `git revert`"
                )
            how = "git revert"
        if caught:
            rollback(co.path, orig)
            raise Interrupted(f"interrupted: revert rolled back, {co.path} is as before")
    return [f"reverted {len(commits)} overlay commit(s) in {co.path} ({how}): {orig[:12]} -> {gitutil.head(co.path)[:12]}"]
