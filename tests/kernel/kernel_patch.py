"""The sgl-kernel series as the tool laid it out: pins and both images.

The pins and the series come from the tool's own manifest reader (sgl_overlay.engine.manifest,
which needs only tomllib and packaging). `sgl-overlay fetch` rebuilds the pre-images from
the patches' full-file context and proves them by blob id, `apply` commits the series on
top and `verify` proves HEAD holds the series' final blobs. So build/trees/sgl-kernel
holds the pre-image at tag `upstream` and the post-image at HEAD, and these tests read both
from there with git instead of parsing the patches again. The GPU tests import this file
on the device machine, which has the repo and that tree but not the tool's venv.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET_NAME = "sgl-kernel"
COPY_CU = "sgl-kernel/csrc/elementwise/copy.cu"
TEST_COPY = "sgl-kernel/tests/test_copy.py"
SERIES_FILES = {COPY_CU, TEST_COPY}
REVS = {"old": "upstream", "new": "HEAD"}

if str(REPO_ROOT / "python") not in sys.path:
    sys.path.append(str(REPO_ROOT / "python"))
from sgl_overlay.engine.gitutil import file_blob  # noqa: E402,F401 (the suites use kp.file_blob)
from sgl_overlay.engine.manifest import load_manifest  # noqa: E402

TARGET = load_manifest(REPO_ROOT / "patches").get(TARGET_NAME)
PINNED_PREIMAGES: dict[str, str] = TARGET.preimages


def _tree() -> Path:
    from helpers import tree_dir  # tests/ is on sys.path under pytest

    return tree_dir(TARGET_NAME)


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(_tree()), *args], capture_output=True, check=True).stdout


def image(side: str, path: str) -> bytes:
    """The pre-image (side='old') or post-image (side='new') of one file."""
    return _git("show", f"{REVS[side]}:{path}")


def tree_blob(side: str, path: str) -> str:
    return _git("rev-parse", f"{REVS[side]}:{path}").decode().strip()


def touched_files() -> set[str]:
    """The files the series changes: the tree's diff from pre-image to post-image."""
    return set(_git("diff", "--name-only", "-z", REVS["old"], REVS["new"]).decode().split("\0")) - {""}


def write_tree(dest: Path, side: str) -> Path:
    """Export the whole pre-image or post-image tree under dest."""
    from helpers import export_tree

    return export_tree(TARGET_NAME, dest, REVS[side])
