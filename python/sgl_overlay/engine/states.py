"""Where each patch of a series stands in a checkout, read from the files' content.

A patch is in when the files hold its post-image (the reverse patch applies, as
patch-package decides it) and can go in when they hold its pre-image (the patch applies).
History only names *whose* change it is: an overlay commit (applied) or not (already
upstream). Everything is simulated in a throw-away index seeded from the content tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path

from sgl_overlay.engine import gitutil
from sgl_overlay.engine.checkout import SAME_PLACE, Placement
from sgl_overlay.engine.scratch import folder, mkdtemp
from sgl_overlay.engine.series import Patch, Series, preimage_from_full_context

HISTORY_DEPTH = 2000  # how far back to look for the commit that brought a patch in
# Context lines around each change when deciding whether a patch is in: one (a full-context patch is rewritten so,
# `git apply -C` trims any other's), so that an upstream edit two lines from a change (a 3-way merge keeps both)
# does not hide it.
NARROW_CONTEXT = 1
NARROW = f"-C{NARROW_CONTEXT}"


class State(StrEnum):
    APPLIED = "applied"  # the files hold its post-image, brought by a commit made from it
    APPLICABLE = "applicable"  # applies exactly (possibly with line offsets)
    APPLICABLE_3WAY = "applicable (3-way)"  # applies only through a 3-way merge
    UPSTREAM = "already upstream"  # the files hold its change, not from a commit made from it
    ELSEWHERE = "in (other commit)"  # the files hold its change from a commit of its subject sgl-overlay did not make
    OLDER = "applied (older)"  # a commit sgl-overlay made from an earlier version of it (another file or content)
    CONFLICTING = "conflicting"
    ABSENT = "target file absent"


PENDING = (State.APPLICABLE, State.APPLICABLE_3WAY)
IN = (State.APPLIED, State.UPSTREAM, State.ELSEWHERE)
BLOCKED = (State.CONFLICTING, State.ABSENT)  # a patch that cannot go in here
ON_TOP = (State.APPLIED, State.ELSEWHERE, State.OLDER)  # brought by a commit above the base: never in a fresh tree


class Outcome(StrEnum):
    """A State in the compatibility matrix's words, on a tree fresh at `upstream` (never one of ON_TOP):
    APPLICABLE is split by whether the files it modifies are the pinned blobs. The legend lists
    them in this order."""

    EXACT = "exact"
    OFFSETS = "offsets"
    THREE_WAY = "3-way"
    CONFLICT = "conflict"
    ABSENT = "absent"
    UPSTREAM = "upstream"

    @property
    def state(self) -> State:
        return _STATE_OF[self]

    @classmethod
    def of(cls, state: State, at_pin: bool = True) -> Outcome:
        """The outcome of `state`; `at_pin`: the files are the pinned pre-images (APPLICABLE only)."""
        if state == State.APPLICABLE:
            return cls.EXACT if at_pin else cls.OFFSETS
        for outcome, of in _STATE_OF.items():
            if of == state:
                return outcome
        raise ValueError(f"{state.value} has no matrix outcome")


_STATE_OF = {
    Outcome.EXACT: State.APPLICABLE,
    Outcome.OFFSETS: State.APPLICABLE,
    Outcome.THREE_WAY: State.APPLICABLE_3WAY,
    Outcome.CONFLICT: State.CONFLICTING,
    Outcome.ABSENT: State.ABSENT,
    Outcome.UPSTREAM: State.UPSTREAM,
}


class Standing(Enum):
    """Where a target stands as a whole (said of one a plain apply leaves alone)."""

    APPLIED = "applied"  # all its patches applied
    IN = "in"  # all in, not all applied
    ABSENT = "absent"  # a patch needs a file that is not here
    CONFLICTS = "conflicts"
    HALF_APPLIED = "half-applied"
    OLDER = "older"  # an earlier version of its patches is applied
    APPLIES = "applies"  # its patches would go in with `apply -t`


@dataclass
class PatchStatus:
    patch: Patch
    state: State
    detail: str = ""
    commit: str = ""


@dataclass(frozen=True)
class Content:
    """The tree states are read from: HEAD's, or HEAD's plus uncommitted working files."""

    tree: str
    uncommitted: tuple[str, ...] = ()


def content_of(repo: Path, working_files: bool = False) -> Content:
    """HEAD's tree; with `working_files`, the tree the tracked working files make (staged or
    not), written from a private index so the user's index stays as it is."""
    head_tree = gitutil.out(repo, "rev-parse", "HEAD^{tree}")
    changed = gitutil.changed_files(repo) if working_files else []
    if not changed:
        return Content(head_tree)
    with ScratchIndex(repo, head_tree) as scratch:
        listed = "".join(f"{path}\0" for path in changed)
        gitutil.git(repo, "update-index", "--add", "--remove", "-z", "--stdin", input=listed, env=scratch.env)
        tree = gitutil.git(repo, "write-tree", env=scratch.env).stdout.strip()
    return Content(tree, tuple(changed))


Made = Mapping[str, str] | None  # commit -> patch label of the commits `apply` made; None: a tree the tool laid out


def find_commit(repo: Path, patch: Patch, placement: Placement = SAME_PLACE, made: Made = None) -> tuple[str, str]:
    """The newest commit in HEAD's recent history with the patch's subject that touches its files, and the label
    of the patch sgl-overlay made it from ('' when it did not make it: a user's commit or cherry-pick); ('', '')
    when there is none. Called only when the files already hold the patch's post-image. In a tree the tool laid
    out (`made` None) every such commit is its own."""
    paths = dict.fromkeys([placement.path(p) for p in patch.touched()] + patch.touched())  # moved, or not yet
    log = gitutil.out(repo, "log", f"-n{HISTORY_DEPTH}", "--format=%H%x09%s", "HEAD", "--", *paths)
    for line in log.splitlines():
        sha, _, subject = line.partition("\t")
        label = patch.label if made is None else made.get(sha, "")
        if subject == patch.subject or (made is not None and label == patch.label):  # (its subject edited since)
            return sha, label
    return "", ""


def made_from(repo: Path, commit: str, patch: Patch, placement: Placement = SAME_PLACE) -> bool:
    """`commit` is what `git am -3` of the patch as it is now makes on its parent: the same files, the same blobs
    (not a commit made from an earlier version of the patch file, whose content the series changed since)."""
    changed = gitutil.git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", commit).stdout
    paths = list(dict.fromkeys([placement.path(p) for p in patch.touched()] + [p for p in changed.split("\0") if p]))
    listed = gitutil.git(repo, "ls-tree", "-r", "-z", f"{commit}^", "--", *paths).stdout
    with ScratchIndex(repo, None, tuple(placement.apply_flags())) as scratch:
        gitutil.git(repo, "update-index", "-z", "--index-info", input=listed, env=scratch.env)
        if scratch.apply(patch.path, "--3way").returncode != 0:
            return False
        return all(scratch.blob(p) == gitutil.blob_at(repo, commit, p) for p in paths)


class ScratchIndex:
    """A private index seeded from `base` (None: empty): `git apply --cached` there never
    touches the tree. Use it as a context manager."""

    def __init__(self, repo: Path, base: str | None = "HEAD", flags: tuple[str, ...] = ()):
        self.repo = repo
        self.flags = flags  # path mapping for every apply (Placement.apply_flags)
        self.dir = mkdtemp("index")  # the index, its .lock and .saved copy
        self.path = os.path.join(self.dir, "index")
        self.env = {"GIT_INDEX_FILE": self.path, **gitutil.object_env(repo)}
        try:
            gitutil.git(repo, "read-tree", *([base] if base else ["--empty"]), env=self.env)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def __enter__(self) -> ScratchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def save(self) -> None:  # a failed `--3way` leaves unmerged entries: restore() drops them
        shutil.copyfile(self.path, self.path + ".saved")

    def restore(self) -> None:
        shutil.copyfile(self.path + ".saved", self.path)

    def apply(self, patch: Path, *flags: str) -> subprocess.CompletedProcess:
        return gitutil.git(
            self.repo, "apply", "--cached", "-v", *self.flags, *flags, str(patch), check=False, env=self.env
        )

    def blob(self, path: str) -> str | None:
        """The blob id at `path` in this index (stage 0), or None."""
        proc = gitutil.git(self.repo, "rev-parse", "--verify", "--quiet", f":{path}", check=False, env=self.env)
        return proc.stdout.strip() or None


def _first_error(proc: subprocess.CompletedProcess) -> str:
    """git's line naming the file and hunk position that failed."""
    errors = [ln[len("error:") :].strip() for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    failed = next((line for line in errors if line.startswith("patch failed:")), None)
    return failed or (errors or proc.stderr.strip().splitlines() or ["git apply refused it"])[-1]


def _holds(scratch: ScratchIndex, patch: Patch, placement: Placement, side: str) -> bool:
    """Every file is exactly the patch's `index` blob on `side` ('old' or 'new'; None: absent)."""
    for c in patch.changes:
        want = c.old_blob if side == "old" else c.new_blob
        have = scratch.blob(placement.path(c.path))
        if (want is None) != (have is None) or (want and not have.startswith(want)):
            return False
    return True


def _holds_post_image(scratch: ScratchIndex, patch: Patch, placement: Placement, reverse: Path) -> bool:
    """All of the patch is in: its post-image blobs, or its reverse (`reverse`: the narrowed form for
    full-context targets) applies."""
    return _holds(scratch, patch, placement, "new") or scratch.apply(reverse, "--check", "-R", NARROW).returncode == 0


def narrow_context(patch: Patch, dest: Path) -> Path:
    """The patch of a full-context target rewritten with NARROW_CONTEXT lines of context, so
    that "is it in?" does not also ask "is every other line of the file as pinned?" (a fork's
    or a 3-way-merged file). Made in a private repository from the pre-images the patch carries."""
    work = dest / patch.path.stem
    gitutil.git(None, "init", "-q", str(work))
    for c in patch.changes:
        if c.old_blob:
            out = work / c.path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(preimage_from_full_context(patch, c.path))
    gitutil.git(work, "add", "-A")
    before = gitutil.out(work, "write-tree")
    gitutil.git(work, "apply", "--cached", str(patch.path))
    after = gitutil.out(work, "write-tree")
    narrowed = dest / patch.path.name
    diff = gitutil.git(work, "diff-tree", "-p", f"-U{NARROW_CONTEXT}", "--full-index", before, after).stdout
    narrowed.write_text(diff, errors="surrogateescape")  # (git's bytes, as read)
    return narrowed


def _post_image(scratch: ScratchIndex, patch: Patch, placement: Placement, reverse: Path) -> str | None:
    """How the files hold the patch's change ('' for all of it), or None when they do not.

    The whole patch (`reverse`: its narrowed form for full-context targets) reverse-applying
    means all of it is in; only the files it modifies reverse-applying means the fix is in
    without the test files it adds."""
    if _holds_post_image(scratch, patch, placement, reverse):
        return ""
    modified = [c.path for c in patch.changes if c.old_blob and c.new_blob]
    added = [c.path for c in patch.changes if not c.old_blob]
    includes = [f"--include={placement.path(p)}" for p in modified]  # matched after the mapping
    if not (modified and added) or scratch.apply(reverse, "--check", "-R", NARROW, *includes).returncode != 0:
        return None
    return f"{', '.join(modified)} already carry the change; the files it adds ({', '.join(added)}) are not there"


def _classify(
    repo: Path, scratch: ScratchIndex, patch: Patch, placement: Placement, reverse: Path, made: Made
) -> PatchStatus:
    differ = patch.not_at_preimage(lambda path: scratch.blob(placement.path(path)))  # as the patch finds them
    absent = [c.path for c, blob in differ if blob is None]
    if absent:
        return PatchStatus(patch, State.ABSENT, detail=placement.path(absent[0]))
    if not _holds(scratch, patch, placement, "old"):
        present = _post_image(scratch, patch, placement, reverse)
        if present is not None:
            return _in(repo, patch, placement, present, "the files hold its post-image (reverse-applies cleanly)", made)
    exact = scratch.apply(patch.path, "--check")
    if exact.returncode == 0:
        scratch.apply(patch.path)
        hunks = [ln.strip().rstrip(".") for ln in exact.stderr.splitlines() if "offset" in ln or "fuzz" in ln]
        return PatchStatus(patch, State.APPLICABLE, detail="; ".join(hunks))
    # A full-context patch fails at line 1 whatever differs; its narrowed form names the hunk
    # (and when it applies, the files differ from the pin only away from the changes).
    narrowed = scratch.apply(reverse, "--check") if reverse != patch.path else exact
    where = _first_error(narrowed)
    if not narrowed.returncode:
        where = ", ".join(placement.path(c.path) for c, _ in differ)
        where += ": not the patch's pre-image, but only away from its changes"
    scratch.save()
    paths = [placement.path(p) for p in patch.touched()]
    before = [scratch.blob(p) for p in paths]
    if scratch.apply(patch.path, "--3way").returncode == 0:
        if [scratch.blob(p) for p in paths] == before:
            # The merge changes nothing: the files hold the change amid other edits.
            return _in(
                repo, patch, placement, "", "a 3-way merge of it changes nothing: the files hold its change", made
            )
        return PatchStatus(patch, State.APPLICABLE_3WAY, detail=where)
    scratch.restore()
    return PatchStatus(patch, State.CONFLICTING, detail=where)


def _in(repo: Path, patch: Patch, placement: Placement, partial: str, how: str = "", made: Made = None) -> PatchStatus:
    """The files hold the patch's change: APPLIED when sgl-overlay made the commit that brought it (all of it)
    from this patch, ELSEWHERE when a commit of its subject it did not make from it did (the user's, or the
    port of another target's patch: `detail` says which), else UPSTREAM. `partial` names what is missing (the
    test files it adds)."""
    sha, label = ("", "") if partial else find_commit(repo, patch, placement, made)
    if sha and label == patch.label and made_from(repo, sha, patch, placement):
        return PatchStatus(patch, State.APPLIED, commit=sha)
    if sha and _same_target(label, patch):  # made from this target's series, from a file it no longer has
        return PatchStatus(patch, State.OLDER, detail=label, commit=sha)
    if sha:
        return PatchStatus(patch, State.ELSEWHERE, detail=label, commit=sha)
    return PatchStatus(patch, State.UPSTREAM, detail=partial or how)


def _same_target(label: str, patch: Patch) -> bool:
    """`label` names a patch file of `patch`'s own target (not another target's port of it)."""
    return label.partition("/")[0] == patch.path.parent.name


def _diff_of(repo: Path, commit: str, dest: Path) -> Path:
    """The change `commit` made, as a patch file in `dest`."""
    path = dest / f"{commit}.diff"
    path.write_text(
        gitutil.out(repo, "diff-tree", "-p", "--full-index", "--binary", "--no-commit-id", commit) + "\n",
        errors="surrogateescape",
    )
    return path


def _older(repo: Path, tree: str, rows: list[PatchStatus], placement: Placement, made: Made) -> list[PatchStatus]:
    """Each row of a patch that is not in whose earlier version is: a commit sgl-overlay made from a patch of its
    subject or file name whose change the files (`tree`) still hold, becomes OLDER. The tool's commits are tried
    newest first, each reversed on the files as the commits above it left them."""
    out = {r.patch.label: r for r in rows if r.state in (*PENDING, *BLOCKED)}
    if not out or made == {}:
        return rows
    subjects = {r.patch.subject: r.patch.label for r in rows}
    paths = dict.fromkeys(p for r in rows for t in r.patch.touched() for p in (placement.path(t), t))
    log = gitutil.out(repo, "log", f"-n{HISTORY_DEPTH}", "--format=%H%x09%s", "HEAD", "--", *paths)
    found: dict[str, tuple[str, str]] = {}  # patch label -> (commit, the label it was made from)
    with ScratchIndex(repo, tree) as scratch, folder("older") as tmp:
        for line in log.splitlines():
            sha, _, subject = line.partition("\t")
            label = subjects.get(subject, "") if made is None else made.get(sha, "")
            if not label:
                continue  # not the tool's commit: the files are judged as they are
            diff = _diff_of(repo, sha, Path(tmp))
            if scratch.apply(diff, "--check", "-R").returncode != 0:
                continue  # its change is not in the files (reverted, or changed since)
            scratch.apply(diff, "-R")
            mine = label if label in out else subjects.get(subject, "")
            if mine in out and mine not in found and _same_target(label, out[mine].patch):
                found[mine] = (sha, label)
    return [
        PatchStatus(r.patch, State.OLDER, detail=found[r.patch.label][1], commit=found[r.patch.label][0])
        if r.patch.label in found
        else r
        for r in rows
    ]


def _peel(scratch: ScratchIndex, series: Series, placement: Placement, reverse: list[Path]) -> set[int]:
    """Which patches the files hold, found newest first: each one found is reverse-applied in `scratch`, so that
    the patch below it is judged on the files as it left them, not as later patches of the same series changed
    them (two patches editing one file). One that is not in (reverted, not applied yet: a reset or bisect to the
    middle of the series) is passed over, not the end of the search."""
    found = set()
    for i in reversed(range(len(series.patches))):
        if _holds_post_image(scratch, series.patches[i], placement, reverse[i]):
            scratch.apply(reverse[i], "-R", NARROW)
            found.add(i)
    return found


def series_status(
    repo: Path,
    series: Series,
    content: Content | None = None,
    placement: Placement = SAME_PLACE,
    made: Made = None,
) -> list[PatchStatus]:
    """The patches the files hold are in (found newest first, see `_peel`); the rest are classified in series
    order on the files as the patches before them leave them, each pending one applied to a scratch index as it
    goes (a later patch sees the earlier ones in); one not in whose earlier version the tool applied is OLDER."""
    tree = (content or content_of(repo)).tree
    with (
        ScratchIndex(repo, tree, tuple(placement.apply_flags())) as scratch,
        folder("narrow") as tmp,
    ):
        full = series.target.full_context
        reverse = [narrow_context(patch, Path(tmp)) if full else patch.path for patch in series.patches]
        held = _peel(scratch, series, placement, reverse)
        statuses = []
        for i, (patch, rev) in enumerate(zip(series.patches, reverse)):
            if i in held:
                scratch.apply(rev, NARROW)  # in again, as the files hold it, for the patches after it
                statuses.append(
                    _in(repo, patch, placement, "", "the files hold its post-image (reverse-applies cleanly)", made)
                )
            else:
                statuses.append(_classify(repo, scratch, patch, placement, rev, made))
    return _older(repo, tree, statuses, placement, made)
