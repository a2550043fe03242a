"""Prove a patched tree is exactly base + series: pinned pre-images and final post-images by blob id."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.manifest import Target
from sgl_overlay.patchfile import read_patch
from sgl_overlay.tree import BASE_TAG, check_preimages


def final_blobs(target: Target) -> dict[str, str | None]:
    """Each touched file's blob id after the whole series (None: deleted)."""
    final: dict[str, str | None] = {}
    for path in target.patch_paths():
        for change in read_patch(path).changes:
            final[change.path] = change.new_blob
    return final


def verify_tree(repo: Path, target: Target) -> list[str]:
    """Problems found (empty when the tree is exactly as the pins and patches say)."""
    problems = [f"{target.name} base: {p}" for p in check_preimages(repo, BASE_TAG, target)]
    for path, blob in final_blobs(target).items():
        found = gitutil.blob_at(repo, "HEAD", path)
        if found is None and blob is None:
            continue
        if found is None or blob is None or not found.startswith(blob):
            problems.append(f"{target.name}: {path} is blob {found}, the series ends at {blob}")
    if gitutil.dirty_files(repo):
        problems.append(f"{target.name}: {repo} has uncommitted changes")
    return problems
