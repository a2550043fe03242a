"""The sentences for what the commands report (apply / check / status / revert, doctor, fetch, export,
pins, apply --abort): every line `cli` prints for them, and the refusal lines `operations` and
`transaction` raise from their facts. It reads the reports' fields only (at run time it imports
`states` alone), so the modules that make the reports may call it too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgl_overlay.states import Standing

if TYPE_CHECKING:
    from pathlib import Path

    from sgl_overlay.doctor import DoctorReport
    from sgl_overlay.operations import (
        AlreadyIn,
        ApplyReport,
        CheckReport,
        OptionalNote,
        PreimageDiffers,
        RevertReport,
        StatusReport,
    )
    from sgl_overlay.routes import Route
    from sgl_overlay.transaction import Aborted
    from sgl_overlay.tree import LaidOut

STATE_WIDTH = 20  # the state column of `status`


def preimage_differs(w: PreimageDiffers) -> str:
    return f"{w.target}: pre-image differs: {w.mismatch}"


def strict_refusal(w: PreimageDiffers) -> str:
    return f"{preimage_differs(w)} (--strict); use the pinned upstream version or drop --strict"


def status_lines(r: StatusReport) -> list[str]:
    """A note on another run, one on uncommitted files, each target's patches with their states, warnings."""
    lines = [f"note: {r.busy}"] if r.busy else []
    if u := r.uncommitted:
        lines.append(
            f"note: {u.count} file(s) have uncommitted changes ({u.ours} touched by the patches; "
            f"first: {u.first}): the states below read the working files, not HEAD; apply and revert refuse until "
            "they are committed or stashed"
        )
    for t in r.targets:
        note = f" (optional here: {t.optional}; only `-t {t.name}` applies it)" if t.optional else ""
        lines.append(f"{t.name} in {r.path}{note}:")
        for row in t.rows:
            extra = row.commit[:12] if row.commit else row.detail
            lines.append(f"  {row.state.value:<{STATE_WIDTH}} {row.patch.label}" + (f"  ({extra})" if extra else ""))
    return lines + [f"warning: {preimage_differs(w)}" for w in r.warnings]


def already_in(a: AlreadyIn) -> str:
    """The line for a checkout where every required patch is in already."""
    if not a.upstream:
        return f"already applied: {a.applied} patch(es) in {a.path}; nothing to do"
    if not a.applied:
        return (
            f"already upstream: {a.upstream} patch(es) in {a.path} (the files hold their change, "
            "not from overlay commits); nothing to do"
        )
    return f"already applied: {a.applied} patch(es), already upstream: {a.upstream}, in {a.path}; nothing to do"


def optional_note(n: OptionalNote) -> str:
    """One line on a target a plain apply leaves alone: what its patches would do here."""
    name, why = n.target, n.why
    match n.standing:
        case Standing.APPLIED:
            return f"{name}: applied here too ({why})"
        case Standing.IN:
            return f"{name}: already in here ({why}; {', '.join(r.state.value for r in n.rows)})"
        case Standing.ABSENT:
            return f"{name}: not applied ({why}); {n.bad.patch.label} needs {n.bad.detail}, which is not here"
        case Standing.CONFLICTS:
            return f"{name}: not applied ({why}); its patch conflicts here: {_port_from(n)}"
        case Standing.HALF_APPLIED:
            return f"{name}: half-applied here ({why}); run `sgl-overlay revert -t {name} --checkout {n.path}`"
    how = "applies with a 3-way merge" if n.three_way else "applies"
    return (
        f"{name}: not applied ({why}); its patch {how} here: add it with "
        f"`sgl-overlay apply -t {name} --checkout {n.path}`"
    )


def _port_from(n: OptionalNote) -> str:
    d = n.differs
    if d is None:
        return "it needs a variant for this tree (`sgl-overlay status` names the hunk)"
    return (
        f"{d.path} is blob {d.have[:12]}, the patch is written for {d.want[:12]}; "
        "it needs a variant for this file (`sgl-overlay status` names the hunk)"
    )


def check_lines(r: CheckReport) -> list[str]:
    if r.refused:
        return [f"would fail: {r.refused}"]
    would = f"{r.pending} patch(es) would apply to {r.path}" if r.pending else already_in(r.already)
    return (
        [f"warning: {preimage_differs(w)}" for w in r.warnings] + [f"ok: {would}"] + list(map(optional_note, r.notes))
    )


def apply_lines(r: ApplyReport) -> list[str]:
    report = [f"warning: {preimage_differs(w)} (continuing; --strict refuses)" for w in r.warnings]
    if r.already is not None:
        return report + [already_in(r.already)] + list(map(optional_note, r.notes))
    skipped = f" ({r.upstream} already upstream, skipped)" if r.upstream else ""
    report.append(f"applied {r.count} patch(es) to {r.path}: {r.before[:12]} -> {r.after[:12]}{skipped}")
    return report + list(map(optional_note, r.notes))


def revert_lines(r: RevertReport) -> list[str]:
    if not r.count:
        states = "; ".join(f"{name}: {', '.join(s.value for s in states)}" for name, states in r.states.items())
        return [f"nothing to revert: no overlay patch is applied in {r.path} ({states})"]
    return [f"reverted {r.count} overlay commit(s) in {r.path} ({r.how}): {r.before[:12]} -> {r.after[:12]}"]


def doctor_lines(r: DoctorReport) -> list[str]:
    """The environment, what is installed there, then each finding (a missing one with its fix, each fix once)."""
    lines = [f"environment: {r.python}"] + [
        f"{d} {v}" if root is None else f"{d} {v} at {root}" for d, v, root in r.installed
    ]
    lines += [route_line(route) for route in r.routes]
    if not r.findings:
        return lines + ["no sglang, sglang-kt or sgl-kernel installed here; pass --python of the serving env"]
    if r.kernel_unchecked:
        lines.append(f"no {' or '.join(r.kernel_unchecked)} installed here: the kernel fix is not checked")
    shown: set[str] = set()  # one fix often mends several findings: print it once, under the first
    for f in r.findings:
        lines.append(f"  [{'ok' if f.ok else 'MISSING'}] {f.target}: {f.what}")
        if not f.ok:
            lines.append(f"      fix: {f.fix}" if f.fix not in shown else "      fix: the one above")
            shown.add(f.fix)
    return lines


def route_line(r: Route) -> str:
    """How the kernel fix reaches one installed sglang, with the torch it pins and the one installed."""
    torch = f"torch {r.torch or 'not installed'}" + (f", {r.dist} pins torch{r.torch_pin}" if r.torch_pin else "")
    how = {
        "plugin": "has sglang.srt.plugins: sgl_kernel_ext's entry point replaces sgl-kernel's copy_to_gpu_no_ce",
        "runner": "has no sglang.srt.plugins: its DeepGEMM runner calls sgl_kernel_ext once its runner patch is in",
        "none": "has no sglang.srt.plugins and is not the KT fork: only sgl-kernel rebuilt with the kernel patch",
    }[r.way.value]
    return f"route: {r.dist} {r.version} {how} ({torch})"


def laid_out(t: LaidOut) -> str:
    if t.files is None:
        return f"tree {t.target}: {t.dest} ready (upstream {t.version})"
    return f"tree {t.target}: {t.dest} laid out ({t.files} files, commit {t.head[:12]})"


def export_lines(written: list[tuple[Path, bool]]) -> list[str]:
    return [f"{'wrote' if changed else 'unchanged'} {dest}" for dest, changed in written]


def pins_lines(manifest: Path, written: list[tuple[str, int]]) -> list[str]:
    lines = [f"pins {name}: {count} pre-image(s) written to {manifest}" for name, count in written]
    return lines or [f"pins: {manifest} already matches the series"]


def who(run: dict) -> str:
    """The run a lock or journal records."""
    return f"`sgl-overlay {run.get('command', '?')}` (pid {run.get('pid', '?')})"


def aborted(a: Aborted) -> str:
    if a.run is None:
        return f"nothing to abort in {a.repo}: no sgl-overlay run left a lock or journal there"
    if not a.head:
        return f"removed the stale lock {a.lock} of {who(a.run)}; nothing to roll back in {a.repo}"
    done = f"; it had done {', '.join(a.done)}" if a.done else ""
    return f"rolled back the killed {who(a.run)} in {a.repo}: HEAD {a.head[:12]} again, as before it ran{done}"


def wheel_names(rows: list[list[str]]) -> list[str]:
    """`wheels --print-names`: one line of space-separated fields per wheel, for scripts."""
    return [" ".join(fields) for fields in rows]
