"""Prove a patched tree is exactly base + series: pinned pre-images and final post-images by blob id, each
patch changing something on the pinned tree, each `base-commit:` naming the commit the series applies to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgl_overlay.builds.tree import BASE_TAG, base_commit, no_op
from sgl_overlay.engine import gitutil
from sgl_overlay.engine.series import PreimageMismatch, Series, check_preimages
from sgl_overlay.errors import OverlayError

MAKE_TREES = "run `make trees` (fetch, apply, verify) first"  # what makes verified trees


@dataclass(frozen=True)
class Unproven:
    """One way a laid-out tree of `target` is not the pins plus the series: a pinned pre-image at `upstream`
    (`base`), a file whose blob at HEAD is not the series' end (`path`: `found`, `want`), uncommitted
    changes in `dirty`, a `patch` that changes nothing on the pinned tree `no_op_on`, or one whose
    `base-commit:` (`says_base`) is not the commit the series applies to (`applies_to`)."""

    target: str
    base: PreimageMismatch | None = None
    path: str = ""
    found: str | None = None
    want: str | None = None
    dirty: Path | None = None
    patch: str = ""
    no_op_on: str = ""
    says_base: str = ""
    applies_to: str = ""

    def line(self) -> str:
        if self.base is not None:
            return f"{self.target} base: {self.base.line()}"
        if self.dirty is not None:
            return f"{self.target}: {self.dirty} has uncommitted changes"
        if self.no_op_on:
            return no_op(self.patch, self.target, self.no_op_on)
        if self.says_base:
            return (
                f"{self.patch} says base-commit {self.says_base}, the {self.target} series applies to "
                f"{self.applies_to}; re-export it with `sgl-overlay export -t {self.target}`"
            )
        return f"{self.target}: {self.path} is blob {self.found}, the series ends at {self.want}"


def verify_tree(repo: Path, series: Series) -> list[Unproven]:
    """Problems found (empty when the tree is exactly as the pins and patches say)."""
    target = series.target
    name = target.name
    problems = [Unproven(name, base=p) for p in check_preimages(repo, BASE_TAG, series)]
    problems += [
        Unproven(name, patch=p.label, no_op_on=target.label)
        for p in series.no_ops(lambda path: gitutil.blob_at(repo, BASE_TAG, path))
    ]
    for path, blob in series.final_blobs().items():
        found = gitutil.blob_at(repo, "HEAD", path)
        if found is None and blob is None:
            continue
        if found is None or blob is None or not found.startswith(blob):
            problems.append(Unproven(name, path=path, found=found, want=blob))
    base = base_commit(target, repo)
    for patch in series.patches:
        if patch.base_commit and patch.base_commit != base:
            problems.append(Unproven(name, patch=patch.label, says_base=patch.base_commit, applies_to=base))
    if gitutil.changed_files(repo):
        problems.append(Unproven(name, dirty=repo))
    return problems


def require_verified(repo: Path, series: Series) -> None:
    """Refuse a tree that is not the pins plus the series (what wheels and pull requests are made from)."""
    problems = verify_tree(repo, series)
    if problems:
        raise OverlayError(f"{problems[0].line()}; {MAKE_TREES}")
