"""Prove a patched tree is exactly base + series: pinned pre-images and final post-images by blob id."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.series import Series
from sgl_overlay.tree import BASE_TAG, check_preimages


def verify_tree(repo: Path, series: Series) -> list[str]:
    """Problems found (empty when the tree is exactly as the pins and patches say)."""
    name = series.target.name
    problems = [f"{name} base: {p}" for p in check_preimages(repo, BASE_TAG, series)]
    for path, blob in series.final_blobs().items():
        found = gitutil.blob_at(repo, "HEAD", path)
        if found is None and blob is None:
            continue
        if found is None or blob is None or not found.startswith(blob):
            problems.append(f"{name}: {path} is blob {found}, the series ends at {blob}")
    if gitutil.changed_files(repo):
        problems.append(f"{name}: {repo} has uncommitted changes")
    return problems
