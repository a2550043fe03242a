"""Prove a patched tree is exactly base + series: pinned pre-images and final post-images by blob id, each
patch changing something on the pinned tree, each `base-commit:` naming the commit the series applies to."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.series import Series, no_op_line
from sgl_overlay.tree import BASE_TAG, base_commit, check_preimages


def verify_tree(repo: Path, series: Series) -> list[str]:
    """Problems found (empty when the tree is exactly as the pins and patches say)."""
    target = series.target
    name = target.name
    problems = [f"{name} base: {p}" for p in check_preimages(repo, BASE_TAG, series)]
    problems += [no_op_line(p, target.label) for p in series.no_ops(lambda path: gitutil.blob_at(repo, BASE_TAG, path))]
    for path, blob in series.final_blobs().items():
        found = gitutil.blob_at(repo, "HEAD", path)
        if found is None and blob is None:
            continue
        if found is None or blob is None or not found.startswith(blob):
            problems.append(f"{name}: {path} is blob {found}, the series ends at {blob}")
    base = base_commit(target, repo)
    for patch in series.patches:
        if patch.base_commit and patch.base_commit != base:
            problems.append(
                f"{patch.label} says base-commit {patch.base_commit}, the {name} series applies to {base}; "
                f"re-export it with `sgl-overlay export -t {name}`"
            )
    if gitutil.changed_files(repo):
        problems.append(f"{name}: {repo} has uncommitted changes")
    return problems
