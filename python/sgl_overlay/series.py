"""Where each patch of a series stands in a checkout, simulated in a throw-away index."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.manifest import Target
from sgl_overlay.patchfile import FULL_CONTEXT, Patch, read_patch

HISTORY_DEPTH = 2000  # how far back to look for commits made from the overlay's patches


class State(str, Enum):
    APPLIED = "applied"  # a commit made from this patch is in HEAD's history
    APPLICABLE = "applicable"  # applies exactly (possibly with line offsets)
    APPLICABLE_3WAY = "applicable (3-way)"  # applies only through a 3-way merge
    UPSTREAM = "already upstream"  # the change is there, not from our commit (reverse-applies)
    CONFLICTING = "conflicting"
    ABSENT = "target file absent"


@dataclass
class PatchStatus:
    patch: Patch
    state: State
    detail: str = ""
    commit: str = ""


def _patch_id(data: bytes) -> str:
    return gitutil.git(None, "patch-id", "--stable", input=data).stdout.decode().split(" ")[0]


def find_commit(repo: Path, patch: Patch, full_context: bool) -> str:
    """The commit in HEAD's recent history made from `patch` (same subject and patch-id), or ''."""
    log = gitutil.out(repo, "log", f"-n{HISTORY_DEPTH}", "--format=%H%x09%s", "HEAD")
    wanted = None
    for line in log.splitlines():
        sha, _, subject = line.partition("\t")
        if subject != patch.subject:
            continue
        wanted = wanted or _patch_id(patch.path.read_bytes())
        ctx = [FULL_CONTEXT] if full_context else []
        shown = gitutil.git(repo, "show", "--format=", *ctx, sha).stdout
        if _patch_id(shown.encode()) == wanted:
            return sha
    return ""


class ScratchIndex:
    """A private index seeded from `base` (None: empty): `git apply --cached` there never
    touches the tree. Use it as a context manager."""

    def __init__(self, repo: Path, base: str | None = "HEAD"):
        self.repo = repo
        fd, self.path = tempfile.mkstemp(prefix="sgl-overlay-index-")
        os.close(fd)
        os.unlink(self.path)
        self.env = {"GIT_INDEX_FILE": self.path}
        gitutil.git(repo, "read-tree", *([base] if base else ["--empty"]), env=self.env)

    def __enter__(self) -> "ScratchIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(self) -> None:  # a failed `--3way` leaves unmerged entries: restore() drops them
        shutil.copyfile(self.path, self.path + ".saved")

    def restore(self) -> None:
        shutil.copyfile(self.path + ".saved", self.path)

    def apply(self, patch: Path, *flags: str) -> subprocess.CompletedProcess:
        return gitutil.git(self.repo, "apply", "--cached", "-v", *flags, str(patch), check=False, env=self.env)

    def close(self) -> None:
        for p in (self.path, self.path + ".lock", self.path + ".saved"):
            if os.path.exists(p):
                os.unlink(p)


def _first_error(proc: subprocess.CompletedProcess) -> str:
    """git's line naming the file and hunk position that failed."""
    errors = [l[len("error:") :].strip() for l in proc.stderr.splitlines() if l.startswith("error:")]
    for line in errors:
        if line.startswith("patch failed:"):
            return line
    if errors:
        return errors[-1]
    return (proc.stderr.strip().splitlines() or ["git apply refused it"])[-1]


def _offsets(proc: subprocess.CompletedProcess) -> str:
    hunks = [l.strip() for l in proc.stderr.splitlines() if "offset" in l or "fuzz" in l]
    return "; ".join(hunks)


def _already_upstream(scratch: ScratchIndex, patch: Patch) -> str | None:
    """A detail line when every file the patch modifies already carries its change, else None.

    Only modified files are reverse-applied: a fix that landed upstream without the test
    file the patch adds is still "already upstream".
    """
    modified = [c.path for c in patch.changes if c.old_blob and c.new_blob]
    if not modified:
        return None
    includes = [f"--include={p}" for p in modified]
    if scratch.apply(patch.path, "--check", "-R", *includes).returncode != 0:
        return None
    added = [c.path for c in patch.changes if not c.old_blob]
    note = f"; the files it adds ({', '.join(added)}) are not upstream" if added else ""
    return f"{', '.join(modified)} already carry the change (reverse-applies cleanly){note}"


# States whose patch is in the scratch index (an absent file may come from one of them).
_IN_SCRATCH = (State.APPLIED, State.APPLICABLE, State.APPLICABLE_3WAY)


def series_status(repo: Path, target: Target) -> list[PatchStatus]:
    """Classify each patch in order, applying the applicable ones to a scratch index as it goes."""
    patches = [read_patch(p) for p in target.patch_paths()]
    result: list[PatchStatus] = []
    with ScratchIndex(repo) as scratch:
        for patch in patches:
            sha = find_commit(repo, patch, target.full_context)
            if sha:
                result.append(PatchStatus(patch, State.APPLIED, commit=sha))
                continue
            absent = [
                c.path for c in patch.changes
                if c.old_blob and gitutil.blob_at(repo, "HEAD", c.path) is None
                and not any(c.path in r.patch.touched() for r in result if r.state in _IN_SCRATCH)
            ]
            if absent:
                result.append(PatchStatus(patch, State.ABSENT, detail=absent[0]))
                continue
            exact = scratch.apply(patch.path, "--check")
            if exact.returncode == 0:
                scratch.apply(patch.path)
                result.append(PatchStatus(patch, State.APPLICABLE, detail=_offsets(exact)))
                continue
            present = _already_upstream(scratch, patch)
            if present is not None:
                result.append(PatchStatus(patch, State.UPSTREAM, detail=present))
                continue
            scratch.save()
            three = scratch.apply(patch.path, "--3way")
            # Both name the hunk where the exact apply failed.
            if three.returncode == 0:
                result.append(PatchStatus(patch, State.APPLICABLE_3WAY, detail=_first_error(exact)))
                continue
            scratch.restore()
            result.append(PatchStatus(patch, State.CONFLICTING, detail=_first_error(exact)))
    return result
