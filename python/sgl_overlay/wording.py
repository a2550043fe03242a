"""Every sentence the tool prints but doctor's report: the lines of what the commands report (apply / check /
status / revert, fetch, export, pins, verify, wheels, apply --abort) and the one line of each failure (`error`,
from an `errors.Why` and its facts). It reads the reports' and errors' fields only; at run time it imports
`errors`, `states` and `transaction` (for their enums) and `series` and `tree` (for names a line quotes),
so every module above those may call it."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sgl_overlay.errors import OverlayError, Why
from sgl_overlay.records import Alive
from sgl_overlay.series import BUG, DROP_WHEN, FORWARDED, NOT_YET
from sgl_overlay.states import Standing, State
from sgl_overlay.transaction import Left
from sgl_overlay.tree import BASE_TAG

if TYPE_CHECKING:
    from pathlib import Path

    from sgl_overlay.checkout import Aside
    from sgl_overlay.operations import (
        AlreadyIn,
        ApplyReport,
        CheckReport,
        OptionalNote,
        PreimageDiffers,
        RevertReport,
        StatusReport,
    )
    from sgl_overlay.prs import PullRequest
    from sgl_overlay.series import Patch
    from sgl_overlay.transaction import Aborted, AmStop, Leftover
    from sgl_overlay.tree import LaidOut, PreimageMismatch
    from sgl_overlay.verify import Unproven

STATE_WIDTH = 20  # the state column of `status`


def preimage_differs(w: PreimageDiffers) -> str:
    return f"{w.target}: pre-image differs: {preimage_mismatch(w.mismatch)}"


def strict_refusal(w: PreimageDiffers) -> str:
    return f"{preimage_differs(w)} (--strict); use the pinned upstream version or drop --strict"


def status_lines(r: StatusReport) -> list[str]:
    """A note on another run, one on uncommitted files, each target's patches with their states, warnings."""
    lines = [f"note: {leftover(r.busy)}"] if r.busy else []
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
        note = f" (optional here: {aside(t.optional)}; only `-t {t.name}` applies it)" if t.optional else ""
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
            lines.append(f"  note: {_older_applied(r.path, older, t.name if t.optional else None)}")
    return lines + [f"warning: {preimage_differs(w)}" for w in r.warnings]


def _older_version(label: str, made_from: str) -> str:
    """What an OLDER row's commit was made from."""
    if made_from == label:
        return "made from an earlier version of this patch, whose content the series has changed since"
    return f"made from {made_from} of an earlier version of the series"


def _older_applied(checkout: Path, patches: list[str], optional: str | None = None) -> str:
    """Which patches are in as an earlier version of the series, and how to have the series as it is now."""
    only = f"-t {optional} " if optional else ""
    return (
        f"{_some(patches)} {'is' if len(patches) == 1 else 'are'} applied as an earlier version of the series "
        f"(other content than the patches have now): run `sgl-overlay revert --checkout {checkout}`, then "
        f"`sgl-overlay apply {only}--checkout {checkout}`"
    )


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


def aside(a: Aside) -> str:
    """Why a plain command leaves a target alone."""
    if a.moved is not None:
        return f"{a.moved.why}; its patches map there"
    return f"{a.folder}/ here is {a.project}'s own copy, not {a.upstream}'s"


def optional_note(n: OptionalNote) -> str:
    """One line on a target a plain apply leaves alone: what its patches would do here."""
    name, why = n.target, aside(n.why)
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
            return f"{name}: not applied as the series has it ({why}); {_older_applied(n.path, older, name)}"
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
        return [f"would fail: {error(r.refused)}"]
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


def who(run: dict) -> str:
    """The run a lock or journal records."""
    return f"`sgl-overlay {run.get('command', '?')}` (pid {run.get('pid', '?')})"


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


def unproven(u: Unproven) -> str:
    """One way a laid-out tree is not the pins plus the series (`verify`)."""
    if u.base is not None:
        return f"{u.target} base: {preimage_mismatch(u.base)}"
    if u.dirty is not None:
        return f"{u.target}: {u.dirty} has uncommitted changes"
    if u.no_op_on:
        return no_op(u.patch, u.target, u.no_op_on)
    if u.says_base:
        return (
            f"{u.patch} says base-commit {u.says_base}, the {u.target} series applies to {u.applies_to}; "
            f"re-export it with `sgl-overlay export -t {u.target}`"
        )
    return f"{u.target}: {u.path} is blob {u.found}, the series ends at {u.want}"


def unproven_line(u: Unproven) -> str:
    return f"error: {unproven(u)}"


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
    return f"matrix {target}{f' {version}' if version else ''}: error: {error(e)}"


def pinned_tree_failed(e: OverlayError) -> str:
    return f"pinned tree: {error(e)}"


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


# Failures: `errors.Why` -> its one line, made from the facts the raising module gives (keyword arguments).


def error(e: OverlayError) -> str:
    """The one line of a failure: what it names and the next step."""
    return ERRORS[e.why](**e.facts)


def preimage_mismatch(m: PreimageMismatch) -> str:
    if m.found is None:
        return f"missing file {m.path} (expected blob {m.expected})"
    return f"{m.path}: expected blob {m.expected}, found {m.found}"


def _ref(ref: str | None, short: bool = False) -> str:
    """A branch (refs/heads/x), a commit, or None (a detached HEAD), as a line names it."""
    if ref is None:
        return "a detached HEAD"
    if ref.startswith("refs/heads/"):
        return ref.removeprefix("refs/heads/") if short else f"branch {ref.removeprefix('refs/heads/')}"
    return ref[:12] if short else f"commit {ref[:12]}"


def _writable(repo: Path, reason: str | None) -> str:
    """The next step when the tool cannot write in a checkout's git directory."""
    if reason == os.strerror(errno.ENOSPC):
        return f"free some space on the device {repo} is on, then run again (nothing was changed)"
    return f"{repo} and its .git must be writable to change it (nothing was changed)"


def _some(files: list[str]) -> str:
    return ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")


def _abort(repo: Path) -> str:
    return f"sgl-overlay apply --abort --checkout {repo}"


def leftover(left: Leftover) -> str:
    """Another run's lock, a lock whose run is gone, or a killed run's journal."""
    run = left.run
    match left.what:
        case Left.RUNNING:
            since = time.strftime("%H:%M:%S", time.localtime(run.get("started") or 0))
            line = f"{left.repo} is being changed by {who(run)} since {since} (lock {left.path}); wait for it to finish"
            if left.alive == Alive.UNSURE:
                line += (
                    f"; its record has no start time to tell that run from another process of pid {run['pid']}: "
                    f"if that is not it, remove it with `rm {left.path}`"
                )
            elif left.alive == Alive.ELSEWHERE:
                line += (
                    f"; it was written on host {run.get('host')}, where this host cannot see its processes: if no "
                    f"sgl-overlay runs on {left.repo} there, remove it with `rm {left.path}`"
                )
            return line
        case Left.STALE_LOCK:
            return f"stale lock {left.path} of {who(run)}, which no longer runs; remove it with `{_abort(left.repo)}`"
    head = str(run.get("head", ""))[:12] or "unknown"
    return (
        f"a killed {who(run)} left {left.repo} mid-change (journal {left.path}, HEAD before {head}); "
        f"roll it back with `{_abort(left.repo)}`"
    )


def am_stop(s: AmStop) -> str:
    """Why `git am` stopped: its line naming the conflict or error, or the hook that refused."""
    if s.hook is None:
        return s.line or "git am failed"
    return f"the {s.hook.name} hook ({s.hook}) refused it" + (f": {s.line}" if s.line else " (it printed nothing)")


def no_wheel_fits(target: str, python: tuple[int, int], covered: list[str]) -> str:
    return f"no pinned {target} wheel fits Python {python[0]}.{python[1]}; the pins cover {', '.join(covered)}"


def no_op(patch: str, target: str, tree: str) -> str:
    """The refusal of a patch that changes nothing on a pinned tree."""
    return (
        f"{patch} changes nothing on {tree}: every file of it there already holds its post-image; "
        f"record where upstream has it under [targets.{target}.applied_upstream] in patches/manifest.toml "
        "and drop it from the series"
    )


def not_a_python_version(text: str) -> str:
    return f"{text!r} is not a Python version like 3.12"


def _in_manifest(manifest: Path, target: str) -> str:
    return f"{manifest}: target {target!r}"


def _alone(checkout: Path, fine: list[str]) -> str:
    """The hint that other targets of this checkout can go in alone."""
    if not fine:
        return ""
    only = " ".join(f"-t {n}" for n in fine)
    return f"; `sgl-overlay apply {only} --checkout {checkout}` applies {', '.join(fine)} alone"


def _uncommitted(checkout: Path, count: int, first: str) -> str:
    return f"{checkout} has uncommitted changes in {count} file(s) (first: {first})"


def _corrupt(path: Path, why: object) -> str:
    return f"corrupt patch file {path} ({why}); restore it with `git checkout -- {path}`"


# What a half-finished git operation is, by the file git keeps for it, and the command that ends it.
GIT_OPERATIONS = {
    "rebase-apply/applying": ("a `git am` in progress (half-applied series?)", "`git am --abort`"),
    "rebase-apply": ("a rebase in progress", "`git rebase --abort`"),
    "rebase-merge": ("a rebase in progress", "`git rebase --abort`"),
    "MERGE_HEAD": ("a merge in progress", "`git merge --abort`"),
    "CHERRY_PICK_HEAD": ("a cherry-pick in progress", "`git cherry-pick --abort`"),
    "REVERT_HEAD": ("a revert in progress", "`git revert --abort`"),
    "BISECT_LOG": (
        "a bisect in progress (its next `git bisect good/bad` would judge the overlay's commits)",
        "`git bisect reset`",
    ),
}
_MAKE_TREES = "run `make trees` (fetch, apply, verify) first"
_PROJECTS = "sgl-project/sglang or kvcache-ai/sglang"  # the upstreams a checkout is of
_SEE_DESIGN = "see docs/DESIGN.md"
_RESTORE = "restore it with `git checkout -- {}`"

ERRORS: dict[Why, Callable[..., str]] = {
    # the command line
    Why.NO_TREE: lambda target, path: f"no tree for {target} at {path}; run `sgl-overlay fetch` first",
    Why.USAGE: lambda message, prog: f"{message}; see `{prog} --help`",
    Why.TERMINATED: lambda signal: f"terminated by signal {signal}",
    # the manifest
    Why.NO_MANIFEST: lambda path: (
        f"no manifest at {path}; pass --patches DIR pointing at the overlay's patches/ folder"
    ),
    Why.MANIFEST_NOT_UTF8: lambda path, reason, byte: (
        f"{path} is not UTF-8 text ({reason} at byte {byte}); {_RESTORE.format(path)}"
    ),
    Why.MANIFEST_UNREADABLE: lambda path, reason: f"cannot read {path} ({reason}); check its permissions",
    Why.MANIFEST_NOT_TOML: lambda path, reason: f"{path} is not valid TOML ({reason}); {_RESTORE.format(path)}",
    Why.NO_SCHEMA: lambda path, schema: f"{path} lacks `schema = {schema}`; add that line at its top",
    Why.OTHER_SCHEMA: lambda path, found, schema: (
        f"{path} is schema {found!r}, this sgl-overlay reads schema {schema}; "
        "use the sgl-overlay of the checkout the patches come from"
    ),
    Why.TARGET_LACKS_KEY: lambda manifest, target, key: (
        f"{_in_manifest(manifest, target)} lacks key {key!r}; {_SEE_DESIGN}"
    ),
    Why.UNKNOWN_KIND: lambda manifest, target, kind, kinds: (
        f"{_in_manifest(manifest, target)} has unknown kind {kind!r}; use one of {', '.join(kinds)}"
    ),
    Why.PATCH_TWICE: lambda manifest, target, patch: (
        f"{_in_manifest(manifest, target)} lists patch {patch} twice; a series applies each patch once"
    ),
    Why.WHEEL_AND_WHEELS: lambda manifest, target: (
        f"{_in_manifest(manifest, target)} has both `wheel` and `wheels`; keep one ({_SEE_DESIGN})"
    ),
    Why.WHEEL_LACKS_KEY: lambda manifest, target, key: (
        f"{_in_manifest(manifest, target)}: a pinned wheel lacks key {key!r}; {_SEE_DESIGN}"
    ),
    Why.BAD_WHEEL_NAME: lambda manifest, target, reason: f"{_in_manifest(manifest, target)}: {reason}",
    Why.WHEEL_OTHER_VERSION: lambda manifest, target, version, wheel, found: (
        f"{_in_manifest(manifest, target)} is version {version}, its wheel {wheel} is {found}; "
        f"pin the wheel of version {version}"
    ),
    Why.NO_WHEEL_PINNED: lambda manifest, target: (
        f"{_in_manifest(manifest, target)} is of kind wheel but pins none; add `wheels` ({_SEE_DESIGN})"
    ),
    Why.WHEEL_TWICE: lambda manifest, target: f"{_in_manifest(manifest, target)} pins one wheel file twice",
    Why.VARIANT_LACKS_KEY: lambda manifest, target, number, key: (
        f"{_in_manifest(manifest, target)}: variant #{number} lacks key {key!r} (needs patch, file, versions)"
    ),
    Why.VARIANT_NOT_LISTED: lambda manifest, target, file, patch: (
        f"{_in_manifest(manifest, target)}: variant {file} stands in for {patch}, which is not in its patches list"
    ),
    Why.VARIANTS_CLASH: lambda patch, version, files: f"{patch}: several variants claim version {version}: {files}",
    Why.APPLIED_NOT_LISTED: lambda manifest, target, patch: (
        f"{_in_manifest(manifest, target)}: applied_upstream names {patch}, which is not in its patches list; "
        "name a patch of the series (a dropped patch needs no entry)"
    ),
    Why.UNKNOWN_TARGET: lambda name, known: f"unknown target {name!r}; known targets: {', '.join(sorted(known))}",
    # the series
    Why.MISSING_PATCH: lambda path: (
        f"missing patch file {path}; restore it with `git checkout -- {path}` or fix patches/manifest.toml"
    ),
    Why.CORRUPT_PATCH: lambda path, reason: _corrupt(path, reason),
    Why.PATCH_CRLF: lambda path: (
        f"{path} has CRLF line ends (a checkout made with core.autocrlf=true?); git's patches are LF: restore "
        f"it with `git config core.autocrlf false` and `git checkout -- {path}` in the overlay's checkout"
    ),
    Why.PATCH_NO_SUBJECT: lambda path: _corrupt(path, "no subject found"),
    Why.PATCH_NO_DIFF: lambda path: _corrupt(path, "no diff found"),
    Why.PATCH_NO_HUNK: lambda path, file: _corrupt(path, f"no readable hunk for {file}"),
    Why.NO_INDEX_LINE: lambda path, file: f"corrupt patch file {path}: {file} has no `index` line",
    Why.NOT_FULL_CONTEXT: lambda patch, file, flag: (
        f"{patch}: {file} is not written with full-file context; re-export it with `git format-patch {flag}`"
    ),
    Why.NOT_TOUCHED: lambda patch, file: f"{patch} does not touch {file}",
    Why.NO_OP_PATCH: no_op,
    Why.NO_PATCH_TOUCHES: lambda target, file: f"no patch of {target} touches {file}; fix patches/manifest.toml",
    Why.LOCK_DISAGREES: lambda target, file, manifest, series: (
        f"patches/manifest.toml [targets.{target}.preimages] disagrees with the series at {file} "
        f"(manifest {manifest or 'none'}, series {series or 'none'}); rewrite it from the series with "
        "`sgl-overlay pins`"
    ),
    # running programs and git
    Why.NO_PROGRAM: lambda program, what: f"{program} does not exist ({what}); pass the path of an existing program",
    Why.NOT_ON_PATH: lambda program, what: f"{program} is not on PATH ({what}); install it or add it to PATH",
    Why.CANNOT_RUN: lambda program, what, reason: (
        f"cannot run {program} ({what}): {reason}; check that it is a working executable"
    ),
    Why.FAILED: lambda what, reason: f"{what} failed: {reason}",
    Why.NO_PATH: lambda path: f"{path} does not exist; pass the root of a git checkout",
    Why.NOT_GIT: lambda path: (
        f"not a git directory: {path}; pass the root of a git checkout of {_PROJECTS} (or run `sgl-overlay fetch`)"
    ),
    Why.DUBIOUS_OWNERSHIP: lambda path: (
        f'git refuses {path}: another user owns it (git\'s "dubious ownership" check); run the tool as its owner, '
        f"or trust it with `git config --global --add safe.directory {path}`"
    ),
    Why.NO_SPACE: lambda what, reason: (
        f"{what} failed: no space left on the device ({reason}); free some space where the checkout and "
        "$TMPDIR are, then run again (the tree is as it was)"
    ),
    Why.GIT_BROKEN: lambda git, reason: (
        f"{git} does not work as git (`git --version`: {reason}); put a working git first on PATH"
    ),
    # a checkout
    Why.NOT_THAT_TARGET: lambda checkout, missing, found: (
        f"{checkout} does not hold target {missing} (it holds {', '.join(found)})"
    ),
    Why.UNKNOWN_PROJECT: lambda checkout: (
        f"unknown project in {checkout}: neither python/pyproject.toml names sglang or sglang-kt nor "
        f"sgl-kernel/ is there; pass a checkout of {_PROJECTS}"
    ),
    Why.GIT_BUSY: lambda checkout, operation: (
        f"{checkout} has {GIT_OPERATIONS[operation][0]}; finish it or run {GIT_OPERATIONS[operation][1]} there, "
        "then try again"
    ),
    Why.DIRTY: lambda checkout, count, first: (
        f"{_uncommitted(checkout, count, first)}; commit or stash them, then try again"
    ),
    Why.READ_ONLY: lambda checkout: (
        f"{checkout} is read-only (git cannot write its objects): apply and revert cannot change it; make it "
        "writable, or work in a writable clone (`git clone` it), then try again"
    ),
    Why.BARE: lambda path: (
        f"{path} is a bare repository (no working tree to patch); pass a checkout of it: `git clone {path} DIR`, "
        "then `--checkout DIR`"
    ),
    Why.UNBORN: lambda checkout, branch: (
        f"{checkout} has no commit yet (branch {branch.removeprefix('refs/heads/')} is unborn); pass a checkout of "
        f"{_PROJECTS}, or commit its files first"
    ),
    Why.SPARSE: lambda checkout: (
        f"{checkout} is a sparse checkout that leaves out the files naming its project (python/pyproject.toml, "
        "sgl-kernel/); widen it with `git sparse-checkout add python sgl-kernel` (or `git sparse-checkout "
        "disable`), then try again"
    ),
    Why.DIRTY_BUILD: lambda checkout, count, first: (
        f"{_uncommitted(checkout, count, first)}: `wheels --checkout` would build them, and the wheel would not "
        "be the checked series; commit or stash them, then build again (nothing was built)"
    ),
    Why.SKIP_WORKTREE_EDITED: lambda checkout, file: (
        f"{file} in {checkout} is edited but marked --skip-worktree, so git shows no change there and `git am` "
        f"would stop on it; `git update-index --no-skip-worktree {file}`, commit or stash the edit, then try again"
    ),
    Why.COMMIT_MSG_HOOK: lambda checkout, hook: (
        f"{checkout} has a commit-msg hook ({hook}) that `git am` does not run: the overlay's commits "
        f"would bypass it; to accept that, `chmod -x {hook}` for this apply and `chmod +x` it after"
    ),
    # laying trees out
    Why.REBUILT_PREIMAGE_DIFFERS: lambda file, patch, found, pinned: (
        f"pre-image of {file} rebuilt from {patch} hashes to {found}, manifest pins {pinned}; "
        "the patch was edited by hand: re-export it from the tree"
    ),
    Why.NOT_THE_TREE: lambda dest, target: f"{dest} exists but is not the {target} tree; remove it or pass --force",
    Why.PINNED_PREIMAGE_DIFFERS: lambda target, mismatch: (
        f"{target}: pinned pre-image differs: {preimage_mismatch(mismatch)}; fix patches/manifest.toml"
    ),
    # apply / revert
    Why.STRICT: lambda differs: strict_refusal(differs),
    Why.FILE_ABSENT: lambda patch, file, checkout, target, alone: (
        f"{patch}: missing file {file} in {checkout}; this checkout is not a version the {target} patches "
        f"support (see `sgl-overlay status`){_alone(checkout, alone)}"
    ),
    Why.CONFLICTS: lambda patch, checkout, detail: (
        f"{patch} conflicts in {checkout}: {detail}; tree left unchanged (see `sgl-overlay status`)"
    ),
    Why.HALF_APPLIED: lambda applied, total, target, checkout, first: (
        f"half-applied series: {applied} of {total} {target} patches are applied in {checkout} ({first}); "
        "run `sgl-overlay revert` there, then apply again"
    ),
    Why.OLDER_APPLIED: lambda checkout, patches: f"{_older_applied(checkout, patches)} (tree left unchanged)",
    Why.UNTRACKED_IN_THE_WAY: lambda patch, file, checkout: (
        f"{patch} adds {file}, but an untracked file is there in {checkout}; move it away, "
        "then apply again (tree left unchanged)"
    ),
    Why.AM_FAILED: lambda patch, checkout, stop: (
        f"{patch or 'the series'} did not apply in {checkout}: {am_stop(stop)}; tree left unchanged "
        "(see `sgl-overlay status`)"
    ),
    Why.REVERT_CONFLICTS: lambda checkout: (
        f"could not revert the overlay's commits in {checkout}: later commits touch the same lines; tree left "
        "unchanged: revert them by hand with `git revert`"
    ),
    Why.REVERT_NO_IDENTITY: lambda checkout: (
        f"could not revert the overlay's commits in {checkout}: git has no identity for the revert commits; "
        "set it with `git config user.name NAME` and `git config user.email EMAIL`, then revert again "
        "(tree left unchanged)"
    ),
    Why.REVERT_GPG: lambda checkout: (
        f"could not revert the overlay's commits in {checkout}: gpg could not sign the revert commits "
        "(commit.gpgSign is set); make gpg work (`echo x | gpg --clearsign`), or revert unsigned with "
        f"`git -C {checkout} config commit.gpgSign false`, then revert again (tree left unchanged)"
    ),
    Why.REVERT_FAILED: lambda checkout, reason: (
        f"could not revert the overlay's commits in {checkout}: {reason}; tree left unchanged"
    ),
    # the lock and the journal
    Why.LEFTOVER: lambda left: leftover(left),
    Why.LOCK_RACE: lambda lock: f"{lock} appeared and went; try again",
    Why.CANNOT_LOCK: lambda lock, repo, reason: f"cannot create {lock} ({reason}); {_writable(repo, reason)}",
    Why.LOCK_HELD: lambda lock: f"{lock} is held",
    Why.CANNOT_JOURNAL: lambda journal, repo, reason: f"cannot write {journal} ({reason}); {_writable(repo, reason)}",
    Why.BAD_JOURNAL: lambda journal, repo, lock, reason, head: (
        f"{journal} cannot be read exactly by this sgl-overlay ({reason}): nothing was changed; to roll that run "
        f"back keeping your work, in {repo}: `git am --abort` if `git status` says an am is in progress, then "
        f"`git reset --keep {head[:12] if head else '<the commit before the run (git reflog)>'}` (it keeps your "
        f"uncommitted changes and refuses where they touch the run's files), then `rm {journal} {lock}`"
    ),
    Why.BAD_LOCK: lambda lock, repo, reason: (
        f"{lock} cannot be read exactly by this sgl-overlay ({reason}): nothing was changed; if no sgl-overlay "
        f"runs on {repo}, remove it with `rm {lock}`"
    ),
    Why.BAD_COMMITS: lambda file, repo: (
        f"{file} cannot be read exactly by this sgl-overlay: nothing was changed; it lists the commits sgl-overlay "
        f"made in {repo}: restore it, or remove it (`rm {file}`: then no commit there counts as applied by "
        "sgl-overlay, and `revert` removes none)"
    ),
    Why.GIT_LOCK_HELD: lambda repo, run, journal, lock, git_lock, pid, command: (
        f"{git_lock} may be held by pid {pid} (`{command or '?'}`), which works in {repo}, not by the killed "
        f"{who(run)}: nothing was changed; let that git finish (or end it), then abort again"
    ),
    Why.GIT_LOCK_NOT_RECORDED: lambda repo, run, journal, lock, git_locks: (
        f"{', '.join(map(str, git_locks))} {'is not a lock' if len(git_locks) == 1 else 'are not locks'} the killed "
        f"{who(run)} recorded as its git's (another git may have made {'it' if len(git_locks) == 1 else 'them'}): "
        f"nothing was changed; if no git runs in {repo}, remove {'it' if len(git_locks) == 1 else 'them'} "
        f"(`rm {' '.join(map(str, git_locks))}`), then abort again"
    ),
    Why.FOREIGN_COMMITS: lambda repo, run, first, journal, lock, head: (
        f"{repo} has commits the killed {who(run)} did not make (first: {first[:60]}); to keep them, "
        f"`rm {journal} {lock}`; to drop them, `git reset --hard {head[:12]}` there, then abort again"
    ),
    Why.BRANCH_SINCE: lambda repo, run, now, was, journal, lock, head: (
        f"{repo} is on {_ref(now)} now, the killed {who(run)} changed {_ref(was)}: nothing was rolled back; "
        f"to roll it back, `git checkout {_ref(was, short=True) if was else '--detach ' + head[:12]}` there (commit or stash your changes first), then "
        f"abort again; to keep everything as it is, `rm {journal} {lock}`"
    ),
    Why.FILES_SINCE: lambda repo, run, files, journal, lock, head: (
        f"{repo}: {_some(files)} changed since the killed {who(run)}, which wrote {'it' if len(files) == 1 else 'them'} "
        "too: nothing was rolled back; to keep your version, copy it aside; then `git checkout HEAD -- "
        f"{' '.join(files)}` there and abort again"
    ),
    Why.INTERRUPTED: lambda command, repo, head: (
        f"interrupted: {command} rolled back, {repo} is as before (HEAD {head[:12]})"
    ),
    # fetch, export, wheels, doctor, matrix
    Why.DOWNLOAD_FAILED: lambda requirement, reason: (
        f"pip could not download {requirement}: {reason}; check the network, or put the wheel into the cache "
        "folder by hand"
    ),
    Why.DISK_FULL: lambda requirement, folder, free: (
        f"pip could not download {requirement}: only {free // (1024 * 1024)} MB free in {folder}, and pip reports "
        "a full disk as a connectivity problem; free some space and run again"
    ),
    Why.OFFLINE_NOT_CACHED: lambda file, cache: (
        f"{file} is not in the cache {cache} and --offline was given; run `sgl-overlay fetch` online once"
    ),
    Why.OTHER_WHEEL_DOWNLOADED: lambda got, requirement, file: (
        f"pip downloaded {got} for {requirement}, the manifest pins {file}; check the pin in patches/manifest.toml"
    ),
    Why.SHA256_MISMATCH: lambda file, expected, found, dest: (
        f"sha256 mismatch for {file}: expected {expected}, found {found}; delete {dest} and run "
        "`sgl-overlay fetch` again (or check the pin in patches/manifest.toml)"
    ),
    Why.SEVERAL_CACHED: lambda dist, version, cache, files: (
        f"several wheels of {dist} {version} in {cache}: {files}; keep one"
    ),
    Why.OFFLINE_NO_VERSION: lambda dist, version, cache: (
        f"no wheel of {dist} {version} in {cache} and --offline was given"
    ),
    Why.NO_TREE_TO_EXPORT: lambda target, tree: (
        f"no tree for {target} at {tree}; run `sgl-overlay fetch` and `apply` first"
    ),
    Why.EXPORT_NAMES_DIFFER: lambda target, names, listed: (
        f"the {target} tree's commits export as {names}, the manifest lists {listed}; update `patches` in "
        "patches/manifest.toml"
    ),
    Why.NO_TRAILER: lambda target, patch, key: (
        f"{target}: the message of {patch} has no `{key}:` trailer; end it with `{BUG}: <issue URL>`, "
        f"`{FORWARDED}: <pull request URL>` (`{NOT_YET}` where there is none) and `{DROP_WHEN}: <the upstream "
        f"change or release that makes it unneeded>` (`git rebase -i {BASE_TAG}`, reword), then export again"
    ),
    Why.PR_NO_DESCRIPTION: lambda path, patch: (
        f"no pull-request description {path} for {patch}; write it (`# [Area] Title`, then the sections of "
        "upstream's template), then run `sgl-overlay prs` again"
    ),
    Why.PR_BAD_TITLE: lambda path, line: (
        f"{path}: first line {line!r} is not a pull-request title; write it as `# [Area] Title` (or, for a "
        "review of an open pull request, `# Review of owner/repo#N: what it proposes`)"
    ),
    Why.PR_SECTIONS: lambda path, found, want, review: (
        f"{path} has the sections {found}, {REVIEW_SHAPE if review else TEMPLATE_SHAPE} has {want}; use exactly "
        "those `## ` headings, in that order"
    ),
    Why.PR_EMPTY_SECTION: lambda path, section: f"{path}: section `## {section}` is empty; say what it asks for",
    Why.PR_NO_ISSUE_LINK: lambda path, bug, same, review: (
        f"{path} does not name the issue its patch fixes ({bug}); add "
        + (
            f"`{'#' + bug.rsplit('/', 1)[1] if same else bug}` to `## Why`"
            if review
            else f"`Fixes {'#' + bug.rsplit('/', 1)[1] if same else bug}` to `## Motivation`"
        )
    ),
    Why.NO_SENDER: lambda setting, where: (
        f"`sgl-overlay prs` writes each pull request as you, and git has no {setting} in {where}; set it "
        f"(`git config --global {setting} ...`, or in that checkout), then run it again"
    ),
    Why.NO_WHEEL_FITS: no_wheel_fits,
    Why.STOCK_WHEEL_DIFFERS: lambda wheel, rel, found, want, file: (
        f"{wheel}: {rel} is {f'blob {found}' if found else 'absent'}, the manifest pins "
        f"{f'blob {want}' if want else 'absent (the series adds it)'} for {file}; the series is proven on the "
        "pinned pre-images only: unpin this wheel in patches/manifest.toml or port the series to it"
    ),
    Why.TREE_NOT_VERIFIED: lambda problem: f"{unproven(problem)}; {_MAKE_TREES}",
    Why.TREE_LACKS_FILE: lambda tree, file: f"{tree} lacks {file} at HEAD; {_MAKE_TREES}",
    Why.WHEEL_NOT_PACKED: lambda made: f"`wheel pack` did not write {made}; is the wheel package >= 0.46 installed?",
    Why.NOT_A_PROJECT: lambda targets, kernel: (
        f"`wheels --checkout` builds the python/ package (sglang or sglang-kt), not {', '.join(targets)}; the "
        f"kernel wheel needs CUDA: build it with `pip wheel --no-deps {kernel}` on a GPU machine"
    ),
    Why.NOT_APPLIED_YET: lambda patch, state, checkout: (
        f"{patch} is {state.value} in {checkout}; run `sgl-overlay apply --checkout {checkout}` first"
    ),
    Why.SOURCE_READ_ONLY: lambda source: (
        f"{source} is read-only and upstream's build writes build/ and *.egg-info there; build from a writable "
        "copy of the checkout"
    ),
    Why.BUILD_FAILED: lambda source, reason: f"upstream's build of {source} failed: {reason}",
    Why.NO_WHEEL_BUILT: lambda source: f"pip wheel produced no wheel from {source}",
    Why.NO_VERSION_TAGS: lambda name, version: (
        f"upstream's build gave {name} version {version} (its fallback when it finds no version, e.g. a clone "
        "without tags); fetch the release tags (`git fetch --tags`) and build again"
    ),
    Why.NO_VERSION_ENV: lambda name, version, variable, source: (
        f"upstream's build gave {name} version {version}: {source}/setup.py takes the version from ${variable}, "
        f"not from tags; build again with it set, e.g. `{variable}=<the fork's version> sgl-overlay wheels "
        "--checkout ...`"
    ),
    Why.PROBE_NOT_JSON: lambda python, line: (
        f"{python} did not answer the environment probe (its last line: {line!r}); pass --python the "
        "environment's Python interpreter itself"
    ),
    Why.SITE_NOT_A_FOLDER: lambda site: f"--site {site} is not a folder; pass the DIR of `pip install --target DIR`",
    Why.MATRIX_UNEXPECTED_STATE: lambda patch, state: f"{patch}: unexpected state {state.value} in a fresh matrix tree",
    Why.VERSIONS_UNKNOWN_TARGET: lambda name, selected: (
        f"--versions names {name!r}, which is not among the selected targets ({', '.join(selected)})"
    ),
    Why.VERSIONS_NEED_TARGET: lambda value: (
        f"--versions {value}: name the target (T=V1,V2) or pass exactly one --target"
    ),
}
