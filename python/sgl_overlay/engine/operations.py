"""apply / check / status / revert: what each finds or does in a checkout, returned as a report that
renders its own lines; changes go all-or-nothing through `transaction`."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

from sgl_overlay.engine import gitutil, records, subproc, transaction
from sgl_overlay.engine.checkout import Aside, Checkout, ensure_hooks_run, ensure_writable
from sgl_overlay.engine.manifest import Target
from sgl_overlay.engine.series import Kind, Patch, PreimageMismatch, check_preimages
from sgl_overlay.engine.states import (
    BLOCKED,
    IN,
    PENDING,
    Content,
    PatchStatus,
    ScratchIndex,
    Standing,
    State,
    content_of,
    series_status,
)
from sgl_overlay.errors import OverlayError, some


@dataclass
class Survey:
    """Every target's patch states in a checkout, read once from one content tree."""

    content: Content
    rows: dict[str, list[PatchStatus]]


def survey(co: Checkout, working_files: bool = False) -> Survey:
    """States of every target's series; `working_files` reads uncommitted files too (status)."""
    content = content_of(co.path, working_files)
    rows = {
        t.name: series_status(co.path, co.series[t.name], content, co.placement(t.name), co.made) for t in co.targets
    }
    return Survey(content, rows)


@dataclass(frozen=True)
class PreimageDiffers:
    """A file of a required target whose patches are not in is not the pinned pre-image."""

    target: str
    mismatch: PreimageMismatch

    def line(self) -> str:
        return f"{self.target}: pre-image differs: {self.mismatch.line()}"


def preimage_warnings(co: Checkout, sv: Survey) -> list[PreimageDiffers]:
    """Blob mismatches of pinned pre-images, for required targets none of whose patches is
    applied (nor, all of them, already upstream: a series that is in needs no warning)."""
    found = []
    for target in co.required:
        rows = sv.rows[target.name]
        if any(s.state in (State.APPLIED, State.ELSEWHERE, State.OLDER) for s in rows) or all(
            s.state in IN for s in rows
        ):
            continue
        for problem in check_preimages(
            co.path, sv.content.tree, co.series[target.name], co.placement(target.name).path
        ):
            if problem.found is not None:  # a missing file is reported as ABSENT by the series
                found.append(PreimageDiffers(target.name, problem))
    return found


@dataclass(frozen=True)
class Uncommitted:
    """Tracked files with uncommitted changes: the states read them, apply and revert refuse."""

    count: int
    ours: int  # of them touched by the patches
    first: str  # the first touched by the patches, else the first


@dataclass(frozen=True)
class TargetStatus:
    name: str
    optional: Aside | None  # why a plain apply leaves the target alone (see Checkout.optional), None: required
    rows: list[PatchStatus]


@dataclass(frozen=True)
class StatusReport:
    path: Path
    busy: transaction.Leftover | None  # another run's lock or a dead run's journal
    uncommitted: Uncommitted | None
    targets: list[TargetStatus]
    warnings: list[PreimageDiffers]
    read_only: bool = False  # git cannot write there: read all the same, apply and revert refuse

    @property
    def ok(self) -> bool:
        """Every required patch can go in (or is in)."""
        stuck = (*BLOCKED, State.OLDER)
        return all(t.optional is not None or r.state not in stuck for t in self.targets for r in t.rows)

    def lines(self) -> list[str]:
        """A note on another run, one on uncommitted files, each target's patches with their states, warnings."""
        lines = [f"note: {self.busy.line()}"] if self.busy else []
        if self.read_only:
            lines.append(
                f"note: {self.path} is read-only: the states below are read all the same (git's new objects go to "
                "a private store of this run); apply, revert and `--abort` need it writable"
            )
        if u := self.uncommitted:
            lines.append(
                f"note: {u.count} file(s) have uncommitted changes ({u.ours} touched by the patches; "
                f"first: {u.first}): the states below read the working files, not HEAD; apply and revert refuse "
                "until they are committed or stashed"
            )
        for t in self.targets:
            note = f" (optional here: {t.optional.line()}; only `-t {t.name}` applies it)" if t.optional else ""
            lines.append(f"{t.name} in {self.path}{note}:")
            lines += [f"  {_row(row)}" for row in t.rows]
            older = [row.patch.label for row in t.rows if row.state == State.OLDER]
            if older:
                lines.append(f"  note: {older_applied(self.path, older, t.name if t.optional else None)}")
        return lines + [f"warning: {w.line()}" for w in self.warnings]


STATE_WIDTH = 20  # the state column of `status`


def _row(row: PatchStatus) -> str:
    """One patch in `status`: its state, label, what the state names, and where upstream stands."""
    extra = row.commit[:12] if row.commit else row.detail
    if row.state == State.OLDER:
        extra = f"commit {row.commit[:12]}, {_older_version(row.patch.label, row.detail)}"
    if row.state == State.ELSEWHERE:
        extra = (
            f"by {row.detail}, commit {row.commit[:12]}"
            if row.detail
            else (f"commit {row.commit[:12]}, not one sgl-overlay made: `revert` leaves it")
        )
    return (
        f"{row.state.value:<{STATE_WIDTH}} {row.patch.label}"
        + (f"  ({extra})" if extra else "")
        + f"  {upstream_of(row.patch)}"
    )


def _older_version(label: str, made_from: str) -> str:
    """What an OLDER row's commit was made from."""
    if made_from == label:
        return "made from an earlier version of this patch, whose content the series has changed since"
    return f"made from {made_from} of an earlier version of the series"


def upstream_of(patch: Patch) -> str:
    """What the patch is (its `Origin:`: pr, review of a pull request, port of a change), where upstream stands on
    it (the manifest's `applied_upstream`, else its `Forwarded:` trailer), what is left to do there and when the
    series can drop it (its `Drop-when:` trailer)."""
    kind, source = patch.origin()
    what = kind.name.lower() + (f" of {source}" if source else "")
    if patch.applied_upstream:
        return f"{what}; drop: upstream since {patch.applied_upstream}"
    if kind is Kind.PORT:
        where = "upstream: carried until the target has it; left: nothing to send"
    elif patch.forwarded:
        where = f"upstream: not applied, forwarded as {patch.forwarded}; left: its review and merge there"
    else:
        left = "post the review" if kind is Kind.REVIEW else "open its pull request"
        where = f"upstream: not applied, not forwarded; left: {left} (`sgl-overlay prs` writes it)"
    return f"{what}; {where}" + (f"; drop when: {patch.drop_when}" if patch.drop_when else "")


def status(co: Checkout) -> StatusReport:
    """Each patch's state, read from the working files."""
    sv = survey(co, working_files=True)
    uncommitted = None
    if sv.content.uncommitted:
        touched = set()  # where the patches' files are in this checkout
        for t in co.targets:
            touched.update(co.placement(t.name).path(p) for p in co.series[t.name].final_blobs())
        ours = [p for p in sv.content.uncommitted if p in touched]
        uncommitted = Uncommitted(len(sv.content.uncommitted), len(ours), (ours or sv.content.uncommitted)[0])
    targets = [TargetStatus(t.name, co.optional.get(t.name), sv.rows[t.name]) for t in co.targets]
    busy, warnings = transaction.leftover(co.path), preimage_warnings(co, sv)
    return StatusReport(co.path, busy, uncommitted, targets, warnings, gitutil.read_only(co.path))


@dataclass(frozen=True)
class BlobDiffers:
    """The file a conflicting patch modifies, and the blob it is written for."""

    path: str
    have: str
    want: str


@dataclass(frozen=True)
class OptionalNote:
    """What the patches of a target a plain apply leaves alone would do here."""

    path: Path
    target: str
    why: Aside
    standing: Standing
    rows: list[PatchStatus]
    bad: PatchStatus | None = None  # the absent or conflicting patch
    differs: BlobDiffers | None = None  # for CONFLICTS: where a port must start from
    three_way: bool = False  # for APPLIES: only through a 3-way merge

    def line(self) -> str:
        """What this target's patches would do here, and the command that does it."""
        name, why = self.target, self.why.line()
        match self.standing:
            case Standing.APPLIED:
                return f"{name}: applied here too ({why})"
            case Standing.IN:
                return f"{name}: already in here ({why}; {', '.join(r.state.value for r in self.rows)})"
            case Standing.ABSENT:
                return f"{name}: not applied ({why}); {self.bad.patch.label} needs {self.bad.detail}, which is not here"
            case Standing.CONFLICTS:
                return f"{name}: not applied ({why}); its patch conflicts here: {self._port_from()}"
            case Standing.HALF_APPLIED:
                return f"{name}: half-applied here ({why}); run `sgl-overlay revert -t {name} --checkout {self.path}`"
            case Standing.OLDER:
                older = [r.patch.label for r in self.rows if r.state == State.OLDER]
                return f"{name}: not applied as the series has it ({why}); {older_applied(self.path, older, name)}"
        how = "applies with a 3-way merge" if self.three_way else "applies"
        return (
            f"{name}: not applied ({why}); its patch {how} here: add it with "
            f"`sgl-overlay apply -t {name} --checkout {self.path}`"
        )

    def _port_from(self) -> str:
        d = self.differs
        if d is None:
            return "it needs a variant for this tree (`sgl-overlay status` names the hunk)"
        return (
            f"{d.path} is blob {d.have[:12]}, the patch is written for {d.want[:12]}; "
            "it needs a variant for this file (`sgl-overlay status` names the hunk)"
        )


def _optional_note(co: Checkout, sv: Survey, target: Target) -> OptionalNote:
    name, rows = target.name, sv.rows[target.name]
    note = OptionalNote(co.path, name, co.optional[name], Standing.APPLIES, rows)
    if all(r.state == State.APPLIED for r in rows):
        return dataclasses.replace(note, standing=Standing.APPLIED)
    if all(r.state in IN for r in rows):
        return dataclasses.replace(note, standing=Standing.IN)
    if any(r.state == State.OLDER for r in rows):
        return dataclasses.replace(note, standing=Standing.OLDER)
    bad = next((r for r in rows if r.state in BLOCKED), None)
    if bad is not None and bad.state == State.ABSENT:
        return dataclasses.replace(note, standing=Standing.ABSENT, bad=bad)
    if bad is not None:
        return dataclasses.replace(
            note, standing=Standing.CONFLICTS, bad=bad, differs=_blob_differs(co, sv, bad, target)
        )
    if any(r.state == State.APPLIED for r in rows):
        return dataclasses.replace(note, standing=Standing.HALF_APPLIED)
    return dataclasses.replace(note, three_way=any(r.state == State.APPLICABLE_3WAY for r in rows))


def _blob_differs(co: Checkout, sv: Survey, row: PatchStatus, target: Target) -> BlobDiffers | None:
    """Which file differs from what the conflicting patch is written for: what a port must start from."""
    where = co.placement(target.name).path
    for c, have in row.patch.not_at_preimage(lambda path: gitutil.blob_at(co.path, sv.content.tree, where(path))):
        if have is not None:  # None: a file an earlier patch of the series adds
            return BlobDiffers(where(c.path), have, c.old_blob)
    return None


def _notes(co: Checkout, sv: Survey) -> list[OptionalNote]:
    return [_optional_note(co, sv, t) for t in co.targets if t.name in co.optional]


def plan(co: Checkout, strict: bool) -> tuple[list[tuple[Path, tuple[str, ...]]], Survey, list[PreimageDiffers]]:
    """The patch files apply would apply (each with its path-mapping flags), the survey and the pre-image
    warnings; refuses, tree untouched, what cannot go all the way."""
    ensure_writable(co)
    ensure_hooks_run(co)
    sv = survey(co)
    warnings = preimage_warnings(co, sv)
    if strict and warnings:
        raise OverlayError(f"{warnings[0].line()} (--strict); use the pinned upstream version or drop --strict")
    to_apply: list[tuple[Path, tuple[str, ...]]] = []
    for target in co.required:
        name, rows = target.name, sv.rows[target.name]
        applied = [r for r in rows if r.state == State.APPLIED]
        pending = [r for r in rows if r.state in PENDING]
        older = [r for r in rows if r.state == State.OLDER]
        if older:  # (what else conflicts here may be that older version's doing)
            raise OverlayError(f"{older_applied(co.path, [r.patch.label for r in older])} (tree left unchanged)")
        for r in rows:
            if r.state == State.ABSENT:
                raise OverlayError(
                    f"{r.patch.label}: missing file {r.detail} in {co.path}; this checkout is not a version the "
                    f"{name} patches support (see `sgl-overlay status`){_alone(co, sv, name)}"
                )
            if r.state == State.CONFLICTING:
                raise OverlayError(
                    f"{r.patch.label} conflicts in {co.path}: {r.detail}; tree left unchanged "
                    "(see `sgl-overlay status`)"
                )
        if applied and pending:
            raise OverlayError(
                f"half-applied series: {len(applied)} of {len(rows)} {name} patches are applied in {co.path} "
                f"({applied[0].patch.label}); run `sgl-overlay revert` there, then apply again"
            )
        _refuse_untracked(co, name, [r.patch for r in pending])
        flags = tuple(co.placement(name).apply_flags())
        to_apply += [(r.patch.path, flags) for r in pending]
    return to_apply, sv, warnings


def _writes(co: Checkout, names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The files the required targets' (or `names`') patches touch, where they sit here, and the blobs their
    `index` lines name: what an apply or revert may leave in the index and working files."""
    paths, blobs = [], []
    for target in co.required if names is None else [t for t in co.targets if t.name in names]:
        where = co.placement(target.name).path
        for patch in co.series[target.name].patches:
            for c in patch.changes:
                paths.append(where(c.path))
                blobs += [b for b in (c.old_blob, c.new_blob) if b]
    return paths, blobs


def _merged(repo: Path, to_apply: list[tuple[Path, tuple[str, ...]]], paths: list[str]) -> list[str]:
    """The blobs `git am -3` writes for the patches, each applied on what the ones before it leave (a 3-way merge
    makes blobs no `index` line names): what a killed apply may leave in the files besides those."""
    found = []
    with ScratchIndex(repo) as scratch:
        for patch, flags in to_apply:
            if scratch.apply(patch, *flags).returncode != 0:
                scratch.apply(patch, *flags, "--3way")
            found += [b for b in map(scratch.blob, paths) if b]
    return found


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


def _alone(co: Checkout, sv: Survey, failed: str) -> str:
    """The hint that the other targets of this checkout can go in alone ("" when none can)."""
    fine = [t.name for t in co.targets if t.name != failed and all(r.state in (*PENDING, *IN) for r in sv.rows[t.name])]
    if not fine:
        return ""
    only = " ".join(f"-t {n}" for n in fine)
    return f"; `sgl-overlay apply {only} --checkout {co.path}` applies {', '.join(fine)} alone"


def older_applied(checkout: Path, patches: list[str], optional: str | None = None) -> str:
    """Which patches are in as an earlier version of the series, and how to have the series as it is now."""
    only = f"-t {optional} " if optional else ""
    return (
        f"{some(patches)} {'is' if len(patches) == 1 else 'are'} applied as an earlier version of the series "
        f"(other content than the patches have now): run `sgl-overlay revert --checkout {checkout}`, then "
        f"`sgl-overlay apply {only}--checkout {checkout}`"
    )


@dataclass(frozen=True)
class AlreadyIn:
    """Every required patch is in already: how many by overlay commits, how many upstream, how many by commits of
    their subject sgl-overlay did not make."""

    path: Path
    applied: int
    upstream: int
    other: int = 0

    def line(self) -> str:
        if self.other:
            parts = [f"already applied: {self.applied}"] if self.applied else []
            parts += [f"already upstream: {self.upstream}"] if self.upstream else []
            return (
                f"already in: {self.applied + self.upstream + self.other} patch(es) in {self.path}, {self.other} of "
                "them by commits sgl-overlay did not make (see `sgl-overlay status`)"
                + "".join(f", {p}" for p in parts)
                + "; nothing to do"
            )
        if not self.upstream:
            return f"already applied: {self.applied} patch(es) in {self.path}; nothing to do"
        if not self.applied:
            return (
                f"already upstream: {self.upstream} patch(es) in {self.path} (the files hold their change, "
                "not from overlay commits); nothing to do"
            )
        return (
            f"already applied: {self.applied} patch(es), already upstream: {self.upstream}, in {self.path}; "
            "nothing to do"
        )


def already_in(co: Checkout, sv: Survey) -> AlreadyIn:
    rows = [r for t in co.required for r in sv.rows[t.name]]
    count = {s: sum(r.state == s for r in rows) for s in (State.APPLIED, State.UPSTREAM, State.ELSEWHERE)}
    return AlreadyIn(co.path, count[State.APPLIED], count[State.UPSTREAM], count[State.ELSEWHERE])


@dataclass(frozen=True)
class CheckReport:
    """What `apply` would do; `refused`: why it would refuse (then nothing else is known)."""

    path: Path
    refused: OverlayError | None = None
    warnings: list[PreimageDiffers] = field(default_factory=list)
    pending: int = 0  # patches it would apply
    already: AlreadyIn | None = None  # when none would
    notes: list[OptionalNote] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.refused is None

    def lines(self) -> list[str]:
        if self.refused:
            return [f"would fail: {self.refused}"]
        would = f"{self.pending} patch(es) would apply to {self.path}" if self.pending else self.already.line()
        return [f"warning: {w.line()}" for w in self.warnings] + [f"ok: {would}"] + [n.line() for n in self.notes]


def check(co: Checkout, strict: bool = False) -> CheckReport:
    """What `apply` would do, touching nothing."""
    try:
        busy = transaction.leftover(co.path)
        if busy:
            raise OverlayError(busy.line())
        to_apply, sv, warnings = plan(co, strict)
    except OverlayError as exc:
        return CheckReport(co.path, refused=exc)
    already = None if to_apply else already_in(co, sv)
    return CheckReport(co.path, None, warnings, len(to_apply), already, _notes(co, sv))


@dataclass(frozen=True)
class ApplyReport:
    """What `apply` did: `count` patches committed (`before` -> `after`), or none (`already`)."""

    path: Path
    warnings: list[PreimageDiffers]
    notes: list[OptionalNote]
    already: AlreadyIn | None = None
    count: int = 0
    before: str = ""
    after: str = ""
    upstream: int = 0  # patches skipped as already upstream
    bypassed: Path | None = None  # the checkout's pre-commit hook, which `git am` does not run
    others: str = ""  # the commits not the tool's that went onto the branch while it ran

    def lines(self) -> list[str]:
        lines = [f"warning: {w.line()} (continuing; --strict refuses)" for w in self.warnings]
        notes = [n.line() for n in self.notes]
        if self.already is not None:
            return lines + [self.already.line()] + notes
        before, after = self.before[:12], self.after[:12]
        skipped = f" ({self.upstream} already upstream, skipped)" if self.upstream else ""
        lines.append(f"applied {self.count} patch(es) to {self.path}: {before} -> {after}{skipped}")
        if self.bypassed is not None:
            lines.append(
                f"note: `git am` does not run the pre-commit hook ({self.bypassed}): these {self.count} commit(s) did "
                f"not go through it; run its checks on them (pre-commit's: `pre-commit run --from-ref {before} "
                f"--to-ref {after}` in {self.path})"
            )
        if self.others:
            lines.append(
                f"note: {self.others}; it is kept, among the overlay's commits (`sgl-overlay revert` removes only those)"
            )
        return lines + notes


def apply(co: Checkout, strict: bool = False) -> ApplyReport:
    """Apply every pending patch of every required target, or nothing at all."""
    with transaction.locked(co.path, "apply"):
        to_apply, sv, warnings = plan(co, strict)
        if not to_apply:
            return ApplyReport(co.path, warnings, _notes(co, sv), already=already_in(co, sv))
        subjects = [r.patch.subject for t in co.required for r in sv.rows[t.name]]
        paths, blobs = _writes(co)
        blobs += _merged(co.path, to_apply, paths)
        labels = [f"{p.parent.name}/{p.name}" for p, _ in to_apply]

        def record(made: list[str]) -> None:  # the commits it made, in order: the tool's, for status and revert
            if co.made is not None:
                records.add_commits(gitutil.common_dir(co.path), co.path, dict(zip(made, labels)))

        with transaction.Change(co.path, "apply", subjects, paths, blobs, on_kept=record) as change:
            # Consecutive patches with the same path mapping go in one `git am`.
            for flags, group in groupby(to_apply, key=lambda item: item[1]):
                patches = [path for path, _ in group]
                proc = transaction.run_am(co.path, patches, co.laid_out, flags)
                if proc.returncode != 0:
                    stuck = transaction.stuck_patch(co.path, patches)
                    stop = transaction.am_failure(proc, co.path).reason()
                    raise OverlayError(
                        f"{stuck or 'the series'} did not apply in {co.path}: {stop}; tree left unchanged "
                        "(see `sgl-overlay status`)"
                    )
            record(change.made())
            others = transaction.foreign_commits(co.path, change.head, subjects)
    upstream = sum(r.state == State.UPSTREAM for t in co.required for r in sv.rows[t.name])
    hook = None if co.laid_out else gitutil.git_path(co.path, "hooks/pre-commit")
    bypassed = hook if hook is not None and hook.is_file() and os.access(hook, os.X_OK) else None
    kept = transaction.others_line(co.path, others, change.data["branch"], "apply") if others else ""
    return ApplyReport(
        co.path,
        warnings,
        _notes(co, sv),
        None,
        len(to_apply),
        change.head,
        gitutil.head(co.path),
        upstream,
        bypassed,
        kept,
    )


@dataclass(frozen=True)
class RevertReport:
    """What `revert` did: `count` overlay commits removed (`how`: reset or git revert), or none
    (`states`: each target's patch states)."""

    path: Path
    count: int = 0
    how: str = ""
    before: str = ""
    after: str = ""
    states: dict[str, list[State]] = field(default_factory=dict)
    others: tuple[str, ...] = ()  # the commits of the patches' subjects the tool did not make here, oldest first

    def lines(self) -> list[str]:
        if not self.count:
            states = "; ".join(f"{name}: {', '.join(s.value for s in ss)}" for name, ss in self.states.items())
            line = f"nothing to revert: no overlay patch is applied in {self.path} ({states})"
            if self.others:
                short = [c[:12] for c in self.others]
                line += (
                    f"; the commits that hold them ({', '.join(short)}) are not ones sgl-overlay made here (a rebase "
                    f"or a clone makes new ones): remove them with `git -C {self.path} revert --no-edit "
                    f"{' '.join(reversed(short))}`"
                )
            return [line]
        return [
            f"reverted {self.count} overlay commit(s) in {self.path} ({self.how}): {self.before[:12]} -> "
            f"{self.after[:12]}"
        ]


def revert(co: Checkout) -> RevertReport:
    """Remove exactly the overlay's commits: reset if they are on top, `git revert` otherwise."""
    with transaction.locked(co.path, "revert"):
        ensure_writable(co)
        st = survey(co).rows
        applied = [r for rows in st.values() for r in rows if r.state in (State.APPLIED, State.OLDER)]
        commits = list(dict.fromkeys(r.commit for r in applied))
        if not commits:
            others = [r.commit for rows in st.values() for r in rows if r.state == State.ELSEWHERE and not r.detail]
            states = {name: [r.state for r in rows] for name, rows in st.items()}
            return RevertReport(co.path, states=states, others=tuple(dict.fromkeys(others)))
        top = gitutil.out(co.path, "rev-list", f"-n{len(commits)}", "HEAD").splitlines()
        # An older version's commit may carry another subject and touch other files than the series now.
        subjects = [
            f'Revert "{s}"' for s in gitutil.out(co.path, "log", "--no-walk", "--format=%s", *commits).splitlines()
        ]
        paths, blobs = _writes(co, list(st))
        for c in commits:
            paths += filter(
                None, gitutil.out(co.path, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", c).split("\0")
            )
        on_top = set(top) == set(commits)
        if on_top:  # what `git reset` writes: the files as they are below the overlay's commits
            below = gitutil.git(co.path, "ls-tree", "-r", "-z", f"HEAD~{len(commits)}", "--", *paths).stdout
            blobs += [entry.split()[2] for entry in below.split("\0") if entry]
        with transaction.Change(co.path, "revert", subjects, paths, blobs) as change:
            if on_top:
                gitutil.git(co.path, "reset", "-q", "--hard", f"HEAD~{len(commits)}")
                how = "reset"
            else:
                ordered = [c for c in gitutil.out(co.path, "rev-list", "HEAD").splitlines() if c in set(commits)]
                proc = gitutil.git(co.path, "revert", "--no-edit", *ordered, check=False)
                if proc.returncode != 0:
                    raise _revert_failure(proc, co.path)
                how = "git revert"
    return RevertReport(co.path, len(commits), how, change.head, gitutil.head(co.path))


def _revert_failure(proc: subprocess.CompletedProcess, checkout: Path) -> OverlayError:
    """Why `git revert` stopped."""
    text = (proc.stdout + proc.stderr).lower()
    could_not = f"could not revert the overlay's commits in {checkout}"
    if "conflict" in text:
        return OverlayError(
            f"{could_not}: later commits touch the same lines; tree left unchanged: revert them by hand with "
            "`git revert`"
        )
    if any(sign in text for sign in ("auto-detect", "tell me who you are", "empty ident")):
        return OverlayError(
            f"{could_not}: git has no identity for the revert commits; set it with `git config user.name NAME` "
            "and `git config user.email EMAIL`, then revert again (tree left unchanged)"
        )
    if "gpg failed to sign" in text:
        return OverlayError(
            f"{could_not}: gpg could not sign the revert commits (commit.gpgSign is set); make gpg work "
            f"(`echo x | gpg --clearsign`), or revert unsigned with `git -C {checkout} config commit.gpgSign false`, "
            "then revert again (tree left unchanged)"
        )
    errors = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("error:")]
    return OverlayError(f"{could_not}: {(errors or [subproc.failure_reason(proc)])[0]}; tree left unchanged")
