"""(Maintainers) write a laid-out tree's overlay commits back to patches/<target>/."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay import gitutil, scratch
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Target
from sgl_overlay.series import FULL_CONTEXT
from sgl_overlay.tree import BASE_TAG, is_ready


def export_series(target: Target, tree: Path) -> list[tuple[Path, bool]]:
    """Write the tree's commits on `upstream` as the target's patch files: each one written, and whether it changed."""
    if not is_ready(tree, target):
        raise OverlayError(f"no tree for {target.name} at {tree}; run `sgl-overlay fetch` and `apply` first")
    with scratch.folder("export") as tmp:
        args = ["format-patch", "-q", "--full-index", "--no-signature", "-o", tmp]
        if target.full_context:
            args.append(FULL_CONTEXT)
        gitutil.git(tree, *args, f"{BASE_TAG}..HEAD")
        made = sorted(Path(tmp).glob("*.patch"))
        names = [p.name for p in made]
        if names != list(target.patches):
            raise OverlayError(
                f"the {target.name} tree's commits export as {names}, the manifest lists "
                f"{list(target.patches)}; update `patches` in patches/manifest.toml"
            )
        target.patch_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for p in made:
            dest = target.patch_dir / p.name
            data = p.read_bytes()
            changed = not dest.exists() or dest.read_bytes() != data
            dest.write_bytes(data)
            written.append((dest, changed))
    return written
