"""The sgl-kernel patch as the tool laid it out: pins, `index` lines, both images.

`sgl-overlay fetch` rebuilds the pre-images from the patch's full-file context (with
unidiff) and proves them by blob id; `apply` commits the patch on top. So
build/trees/sgl-kernel holds the pre-image at tag `upstream` and the post-image at HEAD,
and these tests read both from there instead of parsing the patch a second time.
Standard library only (the GPU tests import it on the device machine).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXT_DIR = REPO_ROOT / "sgl_kernel_ext"
TARGET = "sgl-kernel"
COPY_CU = "sgl-kernel/csrc/elementwise/copy.cu"
TEST_COPY = "sgl-kernel/tests/test_copy.py"
REVS = {"old": "upstream", "new": "HEAD"}

_MANIFEST = tomllib.loads((REPO_ROOT / "patches" / "manifest.toml").read_text())["targets"][TARGET]
PINNED_PREIMAGES: dict[str, str] = _MANIFEST["preimages"]


def series_paths() -> list[Path]:
    """The target's patches, in series order."""
    return [REPO_ROOT / "patches" / TARGET / name for name in _MANIFEST["patches"]]


def patch_index_blobs(patch: Path) -> dict[str, tuple[str, str]]:
    """path -> (old, new) blob ids, as one patch's `index` lines state them."""
    pattern = r"^diff --git a/\S+ b/(\S+)\n(?:(?!diff --git).*\n)*?index ([0-9a-f]+)\.\.([0-9a-f]+)"
    return {path: (old, new) for path, old, new in re.findall(pattern, patch.read_text(), flags=re.M)}


def index_blobs() -> dict[str, tuple[str, str]]:
    """path -> (pre-image blob, post-image blob) over the series: the first patch's
    `old` and the last patch's `new` for each file; consecutive patches must chain
    (one's `new` is the next one's `old`)."""
    out: dict[str, tuple[str, str]] = {}
    for patch in series_paths():
        for path, (old, new) in patch_index_blobs(patch).items():
            if path in out:
                assert out[path][1] == old, f"{patch.name}: {path} does not start from the previous post-image"
                out[path] = (out[path][0], new)
            else:
                out[path] = (old, new)
    return out


def _tree() -> Path:
    from conftest import tree_dir  # tests/ is on sys.path under pytest

    return tree_dir(TARGET)


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(_tree()), *args], capture_output=True, check=True).stdout


def image(side: str, path: str) -> bytes:
    """The pre-image (side='old') or post-image (side='new') of one file."""
    return _git("show", f"{REVS[side]}:{path}")


def tree_blob(side: str, path: str) -> str:
    return _git("rev-parse", f"{REVS[side]}:{path}").decode().strip()


def file_blob(path: Path) -> str:
    return subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()


def write_tree(dest: Path, side: str) -> Path:
    """Export the whole pre-image or post-image tree under dest."""
    from conftest import export_tree

    return export_tree(TARGET, dest, REVS[side])


def import_ext():
    """Import sgl_kernel_ext: an installed copy first (it has the prebuilt _C), else the
    source tree, appended to the path (it then needs load_jit()). A regular package wins
    over the repo's top-level sgl_kernel_ext/ directory, a namespace package."""
    import sys

    sys.path.append(str(EXT_DIR / "python"))
    import sgl_kernel_ext

    return sgl_kernel_ext
