"""apply / check / status / revert: all-or-nothing changes to a checkout through `git am -3`, and the
lines that report them."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from sgl_overlay import gitutil, subproc, transaction
from sgl_overlay.checkout import Checkout, ensure_hooks_run, ensure_writable
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Target
from sgl_overlay.series import Patch
from sgl_overlay.states import BLOCKED, IN, PENDING, Content, PatchStatus, State, content_of, series_status
from sgl_overlay.tree import check_preimages


@dataclass
class Survey:
    """Every target's patch states in a checkout, read once from one content tree."""

    content: Content
    rows: dict[str, list[PatchStatus]]


def survey(co: Checkout, working_files: bool = False) -> Survey:
    """States of every target's series; `working_files` reads uncommitted files too (status)."""
    content = content_of(co.path, working_files)
    rows = {t.name: series_status(co.path, co.series[t.name], content, co.placement(t.name)) for t in co.targets}
    return Survey(content, rows)


def preimage_warnings(co: Checkout, sv: Survey) -> list[str]:
    """Blob mismatches of pinned pre-images, for required targets none of whose patches is
    applied (nor, all of them, already upstream: a series that is in needs no warning)."""
    lines = []
    for target in co.required:
        rows = sv.rows[target.name]
        if any(s.state == State.APPLIED for s in rows) or all(s.state in IN for s in rows):
            continue
        for problem in check_preimages(
            co.path, sv.content.tree, co.series[target.name], co.placement(target.name).path
        ):
            if problem.found is not None:  # a missing file is reported as ABSENT by the series
                lines.append(f"{target.name}: pre-image differs: {problem}")
    return lines


def status(co: Checkout) -> tuple[list[str], bool]:
    """Each patch's state, read from the working files; False when a required one cannot go in."""
    sv = survey(co, working_files=True)
    lines = []
    busy = transaction.leftover(co.path)
    if busy:
        lines.append(f"note: {busy}")
    uncommitted = sv.content.uncommitted
    if uncommitted:
        touched = set()  # where the patches' files are in this checkout
        for t in co.targets:
            touched.update(co.placement(t.name).path(p) for p in co.series[t.name].final_blobs())
        ours = [p for p in uncommitted if p in touched]
        first = (ours or uncommitted)[0]
        lines.append(
            f"note: {len(uncommitted)} file(s) have uncommitted changes ({len(ours)} touched by the patches; "
            f"first: {first}): the states below read the working files, not HEAD; apply and revert refuse until "
            "they are committed or stashed"
        )
    ok = True
    for target in co.targets:
        optional = co.optional.get(target.name)
        note = f" (optional here: {optional}; only `-t {target.name}` applies it)" if optional else ""
        lines.append(f"{target.name} in {co.path}{note}:")
        for r in sv.rows[target.name]:
            extra = r.commit[:12] if r.commit else r.detail
            lines.append(f"  {r.state.value:<20} {r.patch.label}" + (f"  ({extra})" if extra else ""))
            ok &= optional is not None or r.state not in BLOCKED
    return lines + [f"warning: {w}" for w in preimage_warnings(co, sv)], ok


def _optional_note(co: Checkout, sv: Survey, target: Target) -> str:
    """One line on a target a plain apply leaves alone (see Checkout.optional): what its patches would do here."""
    name, why, rows = target.name, co.optional[target.name], sv.rows[target.name]
    if all(r.state == State.APPLIED for r in rows):
        return f"{name}: applied here too ({why})"
    if all(r.state in IN for r in rows):
        return f"{name}: already in here ({why}; {', '.join(r.state.value for r in rows)})"
    bad = next((r for r in rows if r.state in BLOCKED), None)
    if bad is not None and bad.state == State.ABSENT:
        return f"{name}: not applied ({why}); {bad.patch.label} needs {bad.detail}, which is not here"
    if bad is not None:
        return f"{name}: not applied ({why}); its patch conflicts here: {_blob_note(co, sv, bad, target)}"
    if any(r.state == State.APPLIED for r in rows):
        return f"{name}: half-applied here ({why}); run `sgl-overlay revert -t {name} --checkout {co.path}`"
    how = "applies" if all(r.state != State.APPLICABLE_3WAY for r in rows) else "applies with a 3-way merge"
    return (
        f"{name}: not applied ({why}); its patch {how} here: add it with "
        f"`sgl-overlay apply -t {name} --checkout {co.path}`"
    )


def _blob_note(co: Checkout, sv: Survey, row: PatchStatus, target: Target) -> str:
    """Which file differs from what the conflicting patch is written for: what a port must start from."""
    where = co.placement(target.name).path
    for c, have in row.patch.not_at_preimage(lambda path: gitutil.blob_at(co.path, sv.content.tree, where(path))):
        if have is not None:  # None: a file an earlier patch of the series adds
            return (
                f"{where(c.path)} is blob {have[:12]}, the patch is written for {c.old_blob[:12]}; "
                "it needs a variant for this file (`sgl-overlay status` names the hunk)"
            )
    return "it needs a variant for this tree (`sgl-overlay status` names the hunk)"


def _notes(co: Checkout, sv: Survey) -> list[str]:
    return [_optional_note(co, sv, t) for t in co.targets if t.name in co.optional]


def plan(co: Checkout, strict: bool) -> tuple[list[tuple[Path, tuple[str, ...]]], Survey, list[str]]:
    """The patch files apply would apply (each with its path-mapping flags), the survey and the pre-image
    warnings; refuses, tree untouched, what cannot go all the way."""
    ensure_writable(co)
    ensure_hooks_run(co)
    sv = survey(co)
    warnings = preimage_warnings(co, sv)
    if strict and warnings:
        raise OverlayError(f"{warnings[0]} (--strict); use the pinned upstream version or drop --strict")
    to_apply: list[tuple[Path, tuple[str, ...]]] = []
    for target in co.required:
        name, rows = target.name, sv.rows[target.name]
        applied = [r for r in rows if r.state == State.APPLIED]
        pending = [r for r in rows if r.state in PENDING]
        for r in rows:
            if r.state == State.ABSENT:
                raise OverlayError(
                    f"{r.patch.label}: missing file {r.detail} in {co.path}; this checkout is not a "
                    f"version the {name} patches support (see `sgl-overlay status`){_other_targets(co, sv, name)}"
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
        _refuse_untracked(co, name, [r.patch for r in pending])
        flags = tuple(co.placement(name).apply_flags())
        to_apply += [(r.patch.path, flags) for r in pending]
    return to_apply, sv, warnings


def _refuse_untracked(co: Checkout, name: str, patches: list[Patch]) -> None:
    """A file a patch adds must not be there already as a user's untracked file (`git am` would stop)."""
    where = co.placement(name).path
    for patch in patches:
        for c in patch.changes:
            path = where(c.path)
            if (
                c.old_blob is None
                and os.path.lexists(co.path / path)
                and gitutil.blob_at(co.path, "HEAD", path) is None
            ):
                raise OverlayError(
                    f"{patch.label} adds {path}, but an untracked file is there in {co.path}; move it away, "
                    "then apply again (tree left unchanged)"
                )


def _other_targets(co: Checkout, sv: Survey, failed: str) -> str:
    """The hint that another target of this checkout can go in alone."""
    fine = [t.name for t in co.targets if t.name != failed and all(r.state in (*PENDING, *IN) for r in sv.rows[t.name])]
    if not fine:
        return ""
    only = " ".join(f"-t {n}" for n in fine)
    return f"; `sgl-overlay apply {only} --checkout {co.path}` applies {', '.join(fine)} alone"


def check(co: Checkout, strict: bool = False) -> tuple[list[str], bool]:
    """What `apply` would do, touching nothing: its lines, and False when apply would refuse."""
    try:
        busy = transaction.leftover(co.path)
        if busy:
            raise OverlayError(busy)
        to_apply, sv, warnings = plan(co, strict)
    except OverlayError as exc:
        return [f"would fail: {exc}"], False
    would = f"{len(to_apply)} patch(es) would apply to {co.path}" if to_apply else already_in(co, sv)
    return [f"warning: {w}" for w in warnings] + [f"ok: {would}"] + _notes(co, sv), True


def already_in(co: Checkout, sv: Survey) -> str:
    """The line for a checkout where every required patch is in already."""
    rows = [r for t in co.required for r in sv.rows[t.name]]
    applied = sum(r.state == State.APPLIED for r in rows)
    upstream = len(rows) - applied
    if not upstream:
        return f"already applied: {applied} patch(es) in {co.path}; nothing to do"
    if not applied:
        return (
            f"already upstream: {upstream} patch(es) in {co.path} (the files hold their change, "
            "not from overlay commits); nothing to do"
        )
    return f"already applied: {applied} patch(es), already upstream: {upstream}, in {co.path}; nothing to do"


def apply(co: Checkout, strict: bool = False) -> list[str]:
    """Apply every pending patch of every required target, or nothing at all."""
    with transaction.locked(co.path, "apply"):
        to_apply, sv, warnings = plan(co, strict)
        report = [f"warning: {w} (continuing; --strict refuses)" for w in warnings]
        if not to_apply:
            return report + [already_in(co, sv)] + _notes(co, sv)
        targets = [t.name for t in co.required]
        subjects = [r.patch.subject for t in co.required for r in sv.rows[t.name]]
        with transaction.Change(co.path, "apply", targets, subjects) as change:
            # Consecutive patches with the same path mapping go in one `git am`.
            for flags, group in groupby(to_apply, key=lambda item: item[1]):
                patches = [path for path, _ in group]
                proc = transaction.run_am(co.path, patches, co.laid_out, flags)
                if change.caught:
                    raise change.interrupted()
                if proc.returncode != 0:
                    stuck = transaction.stuck_patch(co.path, patches)
                    raise OverlayError(
                        f"{stuck} did not apply in {co.path}: {transaction.am_failure(proc, co.path)}; tree left "
                        "unchanged (see `sgl-overlay status`)"
                    )
                change.done(", ".join(f"{p.parent.name}/{p.name}" for p in patches))
    upstream = sum(r.state == State.UPSTREAM for t in co.required for r in sv.rows[t.name])
    skipped = f" ({upstream} already upstream, skipped)" if upstream else ""
    report.append(
        f"applied {len(to_apply)} patch(es) to {co.path}: {change.head[:12]} -> {gitutil.head(co.path)[:12]}{skipped}"
    )
    return report + _notes(co, sv)


def revert(co: Checkout) -> list[str]:
    """Remove exactly the overlay's commits: reset if they are on top, `git revert` otherwise."""
    with transaction.locked(co.path, "revert"):
        ensure_writable(co)
        st = survey(co).rows
        applied = [r for rows in st.values() for r in rows if r.state == State.APPLIED]
        commits = list(dict.fromkeys(r.commit for r in applied))
        if not commits:
            states = "; ".join(f"{name}: {', '.join(r.state.value for r in rows)}" for name, rows in st.items())
            return [f"nothing to revert: no overlay patch is applied in {co.path} ({states})"]
        top = gitutil.out(co.path, "rev-list", f"-n{len(commits)}", "HEAD").splitlines()
        subjects = [f'Revert "{r.patch.subject}"' for r in applied]
        with transaction.Change(co.path, "revert", list(st), subjects) as change:
            if set(top) == set(commits):
                gitutil.git(co.path, "reset", "-q", "--hard", f"HEAD~{len(commits)}")
                how = "reset"
            else:
                ordered = [c for c in gitutil.out(co.path, "rev-list", "HEAD").splitlines() if c in set(commits)]
                proc = gitutil.git(co.path, "revert", "--no-edit", *ordered, check=False)
                if proc.returncode != 0:
                    raise OverlayError(f"could not revert the overlay's commits in {co.path}: {_revert_failure(proc)}")
                how = "git revert"
            if change.caught:
                raise change.interrupted()
    return [
        f"reverted {len(commits)} overlay commit(s) in {co.path} ({how}): {change.head[:12]} -> "
        f"{gitutil.head(co.path)[:12]}"
    ]


def _revert_failure(proc: subprocess.CompletedProcess) -> str:
    """Why `git revert` stopped, and the next step."""
    text = proc.stdout + proc.stderr
    if "conflict" in text.lower():
        return "later commits touch the same lines; tree left unchanged: revert them by hand with `git revert`"
    if any(sign in text.lower() for sign in ("auto-detect", "tell me who you are", "empty ident")):
        return (
            "git has no identity for the revert commits; set it with `git config user.name NAME` and "
            "`git config user.email EMAIL`, then revert again (tree left unchanged)"
        )
    return f"{subproc.failure_reason(proc)}; tree left unchanged"
