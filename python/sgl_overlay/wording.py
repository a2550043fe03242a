"""Every sentence the tool prints but doctor's report: the lines of what the commands report (apply / check /
status / revert, fetch, export, pins, verify, wheels, apply --abort) and the one line of each failure (`error`,
from an `errors.Why` and its facts). It reads the reports' and errors' fields only; at run time it imports
`errors`, `states` and `transaction` (for their enums) and `series` and `tree` (for names a line quotes),
so every module above those may call it."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from sgl_overlay.errors import OverlayError
from sgl_overlay.operations import older_applied
from sgl_overlay.states import Standing, State
from sgl_overlay.transaction import who

if TYPE_CHECKING:
    from pathlib import Path

    from sgl_overlay.operations import (
        AlreadyIn,
        ApplyReport,
        CheckReport,
        OptionalNote,
        RevertReport,
        StatusReport,
    )
    from sgl_overlay.prs import PullRequest
    from sgl_overlay.series import Patch
    from sgl_overlay.transaction import Aborted
    from sgl_overlay.tree import LaidOut
    from sgl_overlay.verify import Unproven

STATE_WIDTH = 20  # the state column of `status`


def status_lines(r: StatusReport) -> list[str]:
    """A note on another run, one on uncommitted files, each target's patches with their states, warnings."""
    lines = [f"note: {r.busy.line()}"] if r.busy else []
    if r.read_only:
        lines.append(
            f"note: {r.path} is read-only: the states below are read all the same (git's new objects go to a "
            "private store of this run); apply and revert need it writable"
        )
    if u := r.uncommitted:
        lines.append(
            f"note: {u.count} file(s) have uncommitted changes ({u.ours} touched by the patches; "
            f"first: {u.first}): the states below read the working files, not HEAD; apply and revert refuse until "
            "they are committed or stashed"
        )
    for t in r.targets:
        note = f" (optional here: {t.optional.line()}; only `-t {t.name}` applies it)" if t.optional else ""
        lines.append(f"{t.name} in {r.path}{note}:")
        for row in t.rows:
            extra = row.commit[:12] if row.commit else row.detail
            if row.state == State.OLDER:
                extra = f"commit {row.commit[:12]}, {_older_version(row.patch.label, row.detail)}"
            if row.state == State.ELSEWHERE:
                extra = (
                    f"by {row.detail}, commit {row.commit[:12]}"
                    if row.detail
                    else (f"commit {row.commit[:12]}, not one sgl-overlay made: `revert` leaves it")
                )
            lines.append(
                f"  {row.state.value:<{STATE_WIDTH}} {row.patch.label}"
                + (f"  ({extra})" if extra else "")
                + f"  {upstream_of(row.patch)}"
            )
        older = [row.patch.label for row in t.rows if row.state == State.OLDER]
        if older:
            lines.append(f"  note: {older_applied(r.path, older, t.name if t.optional else None)}")
    return lines + [f"warning: {w.line()}" for w in r.warnings]


def _older_version(label: str, made_from: str) -> str:
    """What an OLDER row's commit was made from."""
    if made_from == label:
        return "made from an earlier version of this patch, whose content the series has changed since"
    return f"made from {made_from} of an earlier version of the series"


def upstream_of(patch: Patch) -> str:
    """Where upstream stands on a patch (the manifest's `applied_upstream`, else its `Forwarded:` trailer), what
    is left to do there and when the series can drop it (its `Drop-when:` trailer)."""
    if patch.applied_upstream:
        return f"drop: upstream since {patch.applied_upstream}"
    if patch.forwarded:
        where = f"upstream: not applied, forwarded as {patch.forwarded}; left: its review and merge there"
    else:
        where = "upstream: not applied, not forwarded; left: open its pull request (`sgl-overlay prs` writes it)"
    return where + (f"; drop when: {patch.drop_when}" if patch.drop_when else "")


def already_in(a: AlreadyIn) -> str:
    """The line for a checkout where every required patch is in already."""
    if a.other:
        parts = [f"already applied: {a.applied}"] if a.applied else []
        parts += [f"already upstream: {a.upstream}"] if a.upstream else []
        return (
            f"already in: {a.applied + a.upstream + a.other} patch(es) in {a.path}, {a.other} of them by commits "
            "sgl-overlay did not make (see `sgl-overlay status`)" + "".join(f", {p}" for p in parts) + "; nothing to do"
        )
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
    name, why = n.target, n.why.line()
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
        case Standing.OLDER:
            older = [r.patch.label for r in n.rows if r.state == State.OLDER]
            return f"{name}: not applied as the series has it ({why}); {older_applied(n.path, older, name)}"
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
    return [f"warning: {w.line()}" for w in r.warnings] + [f"ok: {would}"] + list(map(optional_note, r.notes))


def apply_lines(r: ApplyReport) -> list[str]:
    report = [f"warning: {w.line()} (continuing; --strict refuses)" for w in r.warnings]
    if r.already is not None:
        return report + [already_in(r.already)] + list(map(optional_note, r.notes))
    skipped = f" ({r.upstream} already upstream, skipped)" if r.upstream else ""
    report.append(f"applied {r.count} patch(es) to {r.path}: {r.before[:12]} -> {r.after[:12]}{skipped}")
    if r.bypassed is not None:
        report.append(
            f"note: `git am` does not run the pre-commit hook ({r.bypassed}): these {r.count} commit(s) did not go "
            f"through it; run its checks on them (pre-commit's: `pre-commit run --from-ref {r.before[:12]} "
            f"--to-ref {r.after[:12]}` in {r.path})"
        )
    return report + list(map(optional_note, r.notes))


def revert_lines(r: RevertReport) -> list[str]:
    if not r.count:
        states = "; ".join(f"{name}: {', '.join(s.value for s in states)}" for name, states in r.states.items())
        return [f"nothing to revert: no overlay patch is applied in {r.path} ({states})"]
    return [f"reverted {r.count} overlay commit(s) in {r.path} ({r.how}): {r.before[:12]} -> {r.after[:12]}"]


def laid_out(t: LaidOut) -> str:
    if t.files is None:
        return f"tree {t.target}: {t.dest} ready (upstream {t.version})"
    return f"tree {t.target}: {t.dest} laid out ({t.files} files, commit {t.head[:12]})"


def export_lines(written: list[tuple[Path, bool]]) -> list[str]:
    return [f"{'wrote' if changed else 'unchanged'} {dest}" for dest, changed in written]


def prs_lines(made: list[PullRequest]) -> list[str]:
    """One line per exported pull request (or review): its folder, title, files and lines at normal context, and
    for a review the command that posts it."""
    lines = []
    for pr in made:
        line = f"wrote {pr.folder}/: {pr.title} ({len(pr.files)} file(s), +{pr.added} -{pr.removed})"
        if pr.forwarded:
            line += f"; {'sent' if pr.reviews else 'open'} upstream as {pr.forwarded}"
        elif pr.reviews:
            repo, number = pr.reviews
            line += (
                f"; post it on {repo}#{number} with `gh pr review {number} --repo {repo} --comment --body-file "
                f"{pr.folder}/REVIEW.md` (the mbox beside it: the change it proposes)"
            )
        lines.append(line)
    return lines


TEMPLATE_SHAPE, REVIEW_SHAPE = "upstream's template", "a review"  # what a description's sections follow


def pins_lines(manifest: Path, written: list[tuple[str, int]]) -> list[str]:
    lines = [f"pins {name}: {count} pre-image(s) written to {manifest}" for name, count in written]
    return lines or [f"pins: {manifest} already matches the series"]


def aborted(a: Aborted) -> str:
    if a.run is None:
        return f"nothing to abort in {a.repo}: no sgl-overlay run left a lock or journal there"
    if not a.head:
        return f"removed the stale lock {a.lock} of {who(a.run)}; nothing to roll back in {a.repo}"
    done = f"; it had done {', '.join(a.done)}" if a.done else ""
    left = [f"git's lock file(s) {', '.join(p.name for p in a.locks)}"] if a.locks else []
    left += [f"its process(es) {', '.join(map(str, a.ended))}"] if a.ended else []
    removed = f"; removed what it left: {' and '.join(left)}" if left else ""
    return f"rolled back the killed {who(a.run)} in {a.repo}: HEAD {a.head[:12]} again, as before it ran{done}{removed}"


def after_completion(command: str, signum: int) -> str:
    """A signal that came once the change had completed: the run ends with the change standing."""
    return f"sgl-overlay: signal {signum} came after {command} had completed; the change stands as reported above"


def verified(target: str, patches: int) -> str:
    return f"verified {target}: base matches pins, {patches} patch(es) give the exact post-images"


def unproven_line(u: Unproven) -> str:
    return f"error: {u.line()}"


def built(wheel: Path) -> str:
    return f"built {wheel}"


def wrote(path: Path) -> str:
    return f"wrote {path}"


def matrix_tree(target: str, version: str, dest: Path, laid: LaidOut | None, seconds: float) -> str:
    """A version's tree for the matrix: reused (`laid` None) or laid out now."""
    what = f"{dest} reused" if laid is None else laid_out(laid)
    return f"matrix {target} {version}: {what} ({seconds:.1f} s)"


def matrix_tests(target: str, version: str, patch: str, result: object, seconds: float) -> str:
    return f"matrix {target} {version}: {patch} tests {result} ({seconds:.1f} s)"


def matrix_cells(target: str, version: str, outcomes: dict[str, object]) -> str:
    return f"matrix {target} {version}: " + ", ".join(f"{patch}={o}" for patch, o in outcomes.items())


def matrix_failed(target: str, version: str | None, e: OverlayError) -> str:
    """A version the matrix could not cover (None: the pinned tree, without which it covers none)."""
    return f"matrix {target}{f' {version}' if version else ''}: error: {e}"


def pinned_tree_failed(e: OverlayError) -> str:
    return f"pinned tree: {e}"


def matrix_done(targets: int, versions: int, cells: int, seconds: float) -> str:
    return f"matrix: {targets} target(s), {versions} version(s), {cells} cell(s) in {seconds:.0f} s"


def matrix_error(target: str, version: str, message: str) -> str:
    """A version the matrix could not cover, in the closing list of `matrix`."""
    return f"error: {target} {version}: {message}"


def downloading(target: str, requirement: str, file: str = "") -> str:
    return f"fetch {target}: downloading {requirement}" + (f" ({file})" if file else "")


def fetched(target: str, file: str, size: int | None) -> str:
    """A pinned wheel in the cache: `size` bytes downloaded now, or None: there already."""
    how = "from cache (sha256 ok)" if size is None else f"{size / 1e6:.1f} MB, sha256 ok"
    return f"fetch {target}: {file} {how}"


INTERRUPTED = "sgl-overlay: interrupted"


def failed(line: str) -> str:
    """How the command line prints a failure's one line."""
    return f"sgl-overlay: error: {line}"


def not_text(exc: UnicodeError) -> str:
    return f"a file is not valid text ({exc}); restore it from git"


def os_error(exc: OSError) -> str:
    """A file the tool could not use (one no check named before)."""
    where = f" {exc.filename}" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        return f"cannot write{where}: no space left on the device; free some space there, then run again"
    return f"cannot use{where}: {exc.strerror or exc}; check it exists and is readable/writable"


def wheel_names(rows: list[list[str]]) -> list[str]:
    """`wheels --print-names`: one line of space-separated fields per wheel, for scripts."""
    return [" ".join(fields) for fields in rows]


def not_a_python_version(text: str) -> str:
    return f"{text!r} is not a Python version like 3.12"
