"""Reading the overlay's `git format-patch` files: subject, author, trailers, base-commit, touched files,
blob ids, pre-images."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.parser import HeaderParser
from enum import Enum
from pathlib import Path

import unidiff
from unidiff.constants import LINE_TYPE_CONTEXT, LINE_TYPE_NO_NEWLINE, LINE_TYPE_REMOVED

from sgl_overlay.engine import gitutil, subproc
from sgl_overlay.engine.manifest import Target
from sgl_overlay.errors import OverlayError

# `git format-patch`/`git show` context for full-context targets: the whole file, so the
# patch carries its own pre-image (and `git patch-id` sees the same hunks on both sides).
FULL_CONTEXT = "-U100000"
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
# What `git format-patch --base` writes after the diff: the commit the series applies to.
_BASE = re.compile(r"^base-commit: ([0-9a-f]{40})$", re.M)
_TRAILER = re.compile(r"^([A-Za-z0-9-]+): (.+)$")
_PULL = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/pull/\d+")
# What the patch is (DEP-3's `Origin:`): `vendor`, `other, <pull request URL>` or `backport, <what it ports>`.
ORIGIN = "Origin"
# The forwarding trailers every patch carries (DEP-3's names): a URL, NOT_YET, or NOT_NEEDED (a port's).
BUG, FORWARDED = "Bug", "Forwarded"
NOT_YET, NOT_NEEDED = "not-yet", "not-needed"
# The trailer that says when the patch can go: the upstream change or release after which no pin needs it.
DROP_WHEN = "Drop-when"
TRAILERS = (ORIGIN, BUG, FORWARDED, DROP_WHEN)  # every patch ends with them, in this order; `prs` leaves them out


class Kind(Enum):
    """What a patch is, by its `Origin:` word."""

    PR = "vendor"  # a pull request we send
    REVIEW = "other"  # a review of another author's open pull request (`Origin: other, <its URL>`)
    PORT = "backport"  # an upstream change carried until the target has it (`Origin: backport, <source>`)


# Every patch's From: (what `export` writes): the series names no author. git am needs a name and takes an
# empty address; `sgl-overlay prs` writes each pull request as its sender instead.
NO_AUTHOR_NAME, NO_AUTHOR_EMAIL = "unattributed", ""
NO_AUTHOR = f"{NO_AUTHOR_NAME} <{NO_AUTHOR_EMAIL}>"


@dataclass(frozen=True)
class FileChange:
    path: str
    old_blob: str | None  # None for a file the patch adds
    new_blob: str | None  # None for a file the patch deletes


@dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    changes: tuple[FileChange, ...]
    patchset: unidiff.PatchSet
    author: str = ""  # the mail's From:, "Name <email>"
    trailers: tuple[tuple[str, str], ...] = ()  # the message's closing "Key: value" lines
    base_commit: str = ""  # its `base-commit:` line, if any
    applied_upstream: str = ""  # where upstream has it (the manifest's `applied_upstream`); "" while it does not

    @property
    def label(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def forwarded(self) -> str:
        """Where the patch was sent upstream (its `Forwarded:` URL); "" while it was not, or for a port."""
        sent = self.trailer(FORWARDED)
        return "" if sent in (NOT_YET, NOT_NEEDED) else sent

    @property
    def kind(self) -> Kind:
        return self.origin()[0]

    def origin(self) -> tuple[Kind, str]:
        """What the patch is (its `Origin:` trailer) and what that names: the reviewed pull request's URL, the
        change a port carries, "" for a pull request of ours. Refused with one line where it is missing or
        malformed, or where `Forwarded: not-needed` is not exactly on a port."""
        word, _, source = (part.strip() for part in self.trailer(ORIGIN).partition(","))
        kind = next((k for k in Kind if k.value == word), None)
        problem = ""
        if kind is None:
            problem = f"no `{ORIGIN}:` trailer" if not word else f"`{ORIGIN}: {word}`, which is no kind of patch"
        elif (kind is Kind.PR) != (not source) or (kind is Kind.REVIEW and not _PULL.fullmatch(source)):
            problem = f"`{ORIGIN}: {self.trailer(ORIGIN)}`"
        elif (kind is Kind.PORT) != (self.trailer(FORWARDED) == NOT_NEEDED):
            problem = f"`{ORIGIN}: {word}` with `{FORWARDED}: {self.trailer(FORWARDED)}`"
        if problem:
            raise OverlayError(
                f"{self.path} has {problem}; its message's trailers start with `{ORIGIN}: vendor` (a pull request "
                f"we send), `{ORIGIN}: other, <pull request URL>` (a review of it) or `{ORIGIN}: backport, <what it "
                f"ports>` (with `{FORWARDED}: {NOT_NEEDED}`, only there): reword its commit and `sgl-overlay export`"
            )
        return kind, source

    @property
    def drop_when(self) -> str:
        """When the series can drop it (its `Drop-when:` trailer; "" where it has none)."""
        return self.trailer(DROP_WHEN)

    def trailer(self, key: str) -> str:
        """The value of the message's last `key:` trailer ("" when there is none)."""
        return next((v for k, v in reversed(self.trailers) if k.lower() == key.lower()), "")

    def touched(self) -> list[str]:
        return [c.path for c in self.changes]

    def not_at_preimage(self, blob_of: Callable[[str], str | None]) -> list[tuple[FileChange, str | None]]:
        """The files this patch modifies or deletes (paths as the patch names them) whose blob, `blob_of(path)`, is not
        the patch's `index` pre-image, each with that blob (None: the file is absent)."""
        found = [(c, blob_of(c.path)) for c in self.changes if c.old_blob]
        return [(c, blob) for c, blob in found if blob is None or not blob.startswith(c.old_blob)]


def _subject(raw: bytes) -> str:
    # git's own mail parser, so "Subject: [PATCH 1/2] ..." folding and prefixes are handled as git am does.
    proc = gitutil.git(None, "mailinfo", "-b", "/dev/null", "/dev/null", input=raw, check=False)
    lines = proc.stdout.decode(errors="replace").splitlines()
    return next((line.removeprefix("Subject: ").strip() for line in lines if line.startswith("Subject: ")), "")


def mail_parts(text: str) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """The mail's author, the trailers of its commit message and its `base-commit:` (or "")."""
    head, _, rest = text.partition("\n\n")
    sender = HeaderParser().parsestr(head + "\n").get("From", "")
    author = str(make_header(decode_header(sender))) if sender else ""
    message = rest.split("\n---\n", 1)[0].rstrip("\n")
    last = message.rsplit("\n\n", 1)[-1].splitlines()
    matches = [_TRAILER.match(line) for line in last]
    trailers = tuple(m.groups() for m in matches if m) if all(matches) else ()
    bases = _BASE.findall(text)
    return " ".join(author.split()), trailers, bases[-1] if bases else ""


def _blob_or_none(blob: str) -> str | None:
    """An `index` line's blob id; None for the all-zero id of a file the patch adds or deletes."""
    return blob if blob.strip("0") else None


def _corrupt(path: Path, why: object) -> OverlayError:
    return OverlayError(f"corrupt patch file {path} ({why}); restore it with `git checkout -- {path}`")


def read_patch(path: Path, applied_upstream: str = "") -> Patch:
    """Parse one patch file; a missing or unreadable one is a one-line error."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise OverlayError(
            f"missing patch file {path}; restore it with `git checkout -- {path}` or fix patches/manifest.toml"
        ) from None
    if raw.partition(b"\n")[0].endswith(b"\r"):  # its mbox header line: the whole file was converted
        raise OverlayError(
            f"{path} has CRLF line ends (a checkout made with core.autocrlf=true?); git's patches are LF: restore "
            f"it with `git config core.autocrlf false` and `git checkout -- {path}` in the overlay's checkout"
        )
    try:
        patchset = unidiff.PatchSet(raw.decode("utf-8"))
    except (UnicodeDecodeError, unidiff.UnidiffParseError) as exc:
        raise _corrupt(path, exc) from None
    # git's own parser must accept it too: it is what `git am` will run.
    check = gitutil.git(None, "apply", "--numstat", str(path), check=False)
    if check.returncode != 0:
        raise _corrupt(path, subproc.failure_reason(check).removeprefix("error: "))
    subject = _subject(raw)
    if not subject or len(patchset) == 0:
        raise _corrupt(path, "no subject found" if not subject else "no diff found")
    changes = []
    for pf in patchset:
        if len(pf) == 0 and not (pf.is_rename or pf.is_binary_file or pf.is_added_file or pf.is_removed_file):
            raise _corrupt(path, f"no readable hunk for {pf.path}")
        index = [_INDEX.match(line) for line in str(pf.patch_info).splitlines()]
        blobs = [m.groups() for m in index if m]
        if not blobs:
            raise OverlayError(f"corrupt patch file {path}: {pf.path} has no `index` line")
        old, new = blobs[-1]
        changes.append(FileChange(pf.path, _blob_or_none(old), _blob_or_none(new)))
    author, trailers, base = mail_parts(raw.decode("utf-8"))
    return Patch(path, subject, tuple(changes), patchset, author, trailers, base, applied_upstream)


def preimage_from_full_context(patch: Patch, file_path: str) -> bytes:
    """Rebuild a file's pre-image from a patch written with full-file context.

    The source side of a full-context hunk is the whole old file; its blob id, checked by
    the caller against the manifest, proves that nothing was left out.
    """
    for pf in patch.patchset:
        if pf.path != file_path:
            continue
        if len(pf) != 1 or pf[0].source_start not in (0, 1):
            raise OverlayError(
                f"{patch.label}: {file_path} is not written with full-file context; re-export it with "
                f"`git format-patch {FULL_CONTEXT}`"
            )
        lines: list[str] = []
        last_type = None
        for line in pf[0]:
            if line.line_type == LINE_TYPE_NO_NEWLINE:
                if last_type in (LINE_TYPE_CONTEXT, LINE_TYPE_REMOVED) and lines:
                    lines[-1] = lines[-1].rstrip("\n")
            elif line.line_type in (LINE_TYPE_CONTEXT, LINE_TYPE_REMOVED):
                lines.append(line.value)
            last_type = line.line_type
        return "".join(lines).encode("utf-8")
    raise OverlayError(f"{patch.label} does not touch {file_path}")


def same_blob(a: str | None, b: str | None) -> bool:
    """Two blob ids name one blob (an `index` line may abbreviate it)."""
    return bool(a and b and (a.startswith(b) or b.startswith(a)))


def _same(a: str | None, b: str | None) -> bool:
    """`same_blob`, where two absent files (None) are the same too."""
    return a is b is None or same_blob(a, b)


@dataclass(frozen=True)
class Series:
    """A target's patches, parsed once and passed to whatever needs them."""

    target: Target
    patches: tuple[Patch, ...]

    @classmethod
    def read(cls, target: Target) -> Series:
        applied = target.applied_upstream
        return cls(target, tuple(read_patch(p, applied.get(p.name, "")) for p in target.patch_paths()))

    def preimages(self) -> dict[str, str]:
        """Each pre-existing file the series modifies or deletes -> its blob before the series: the `index`
        pre-image of the first patch touching it (a file the series adds has none). The only source of
        pre-images; the manifest's `preimages` table is a lock of it (check_lock)."""
        first: dict[str, str | None] = {}
        for patch in self.patches:
            for c in patch.changes:
                first.setdefault(c.path, c.old_blob)
        return {path: blob for path, blob in first.items() if blob}

    def first_touches(self) -> list[tuple[Patch, list[str]]]:
        """Each patch with the pre-existing files it is the first of the series to touch."""
        seen: set[str] = set()
        result = []
        for patch in self.patches:
            new = [c.path for c in patch.changes if c.path not in seen and c.old_blob]
            seen.update(patch.touched())
            result.append((patch, new))
        return result

    def check_lock(self) -> None:
        """Refuse a manifest whose `preimages` table is not exactly what the series says."""
        want, have = self.preimages(), self.target.preimages
        differ = sorted(p for p in want.keys() | have.keys() if not same_blob(want.get(p), have.get(p)))
        if not differ:
            return
        path = differ[0]
        raise OverlayError(
            f"patches/manifest.toml [targets.{self.target.name}.preimages] disagrees with the series at {path} "
            f"(manifest {have.get(path) or 'none'}, series {want.get(path) or 'none'}); rewrite it from the series "
            "with `sgl-overlay pins`"
        )

    def final_blobs(self) -> dict[str, str | None]:
        """Each touched file's blob id after the whole series (None: deleted)."""
        return {c.path: c.new_blob for patch in self.patches for c in patch.changes}

    def no_ops(self, blob_of: Callable[[str], str | None]) -> list[Patch]:
        """The patches that change nothing on a base whose files are `blob_of(path)` (None: absent): every
        file each one touches that the pinned tree can hold (Target.lays_out: a wheel has no tests) already
        holds its post-image there, after the patches before it."""
        now: dict[str, str | None] = {}
        found = []
        for patch in self.patches:
            held = [c for c in patch.changes if self.target.lays_out(c.path)]
            before = [now[c.path] if c.path in now else blob_of(c.path) for c in held]
            if held and all(_same(b, c.new_blob) for b, c in zip(before, held)):
                found.append(patch)
            now.update((c.path, c.new_blob) for c in patch.changes)
        return found

    def source_of(self, path: str) -> Patch:
        """The first patch touching a pinned file: a full-context one carries its pre-image."""
        source = next((p for p in self.patches if path in p.touched()), None)
        if source is None:
            raise OverlayError(f"no patch of {self.target.name} touches {path}; fix patches/manifest.toml")
        return source


@dataclass(frozen=True)
class PreimageMismatch:
    path: str
    expected: str
    found: str | None  # None: the file is missing

    def line(self) -> str:
        if self.found is None:
            return f"missing file {self.path} (expected blob {self.expected})"
        return f"{self.path}: expected blob {self.expected}, found {self.found}"


def check_preimages(repo: Path, rev: str, series: Series, where: Callable[[str], str] = str) -> list[PreimageMismatch]:
    """Each pre-image of the series (Series.preimages) whose blob at `rev` (a commit or tree) differs or is
    missing, judged by the first patch touching it. `where` maps a path to its place in `repo` (a moved folder)."""
    problems = []
    for patch, first in series.first_touches():
        for c, found in patch.not_at_preimage(lambda path: gitutil.blob_at(repo, rev, where(path))):
            if c.path in first:
                problems.append(PreimageMismatch(where(c.path), c.old_blob or "", found))
    return problems
