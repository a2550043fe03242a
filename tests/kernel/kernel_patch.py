"""Read patches/sgl-kernel/0001-*.patch: its blob ids and the full files on both sides.

The sgl-kernel patch is written with full-file context (docs/DESIGN.md), so each
file's single hunk holds the whole pre-image (context + removed lines) and the
whole post-image (context + added lines). Standard library only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PATCH_DIR = REPO_ROOT / "patches" / "sgl-kernel"
EXT_DIR = REPO_ROOT / "sgl_kernel_ext"

COPY_CU = "sgl-kernel/csrc/elementwise/copy.cu"
TEST_COPY = "sgl-kernel/tests/test_copy.py"
# Pinned pre-images (../shared/UPSTREAM.md; sgl-project/sglang at 0ba3cdd4).
PINNED_PREIMAGES = {
    COPY_CU: "327a9ab6445fa7167cab1ee24b593ae575428813",
    TEST_COPY: "70ed864c134b9ac44582a5a6a0e2041f3b9cccc0",
}


def blob_id(data: bytes) -> str:
    """`git hash-object` of the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FilePatch:
    path: str
    old_blob: str
    new_blob: str
    old: bytes
    new: bytes


def copy_patch_path() -> Path:
    found = sorted(PATCH_DIR.glob("0001-*.patch"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one 0001-*.patch in {PATCH_DIR}, found {found}")
    return found[0]


_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse(patch: Path | None = None) -> dict[str, FilePatch]:
    """Both sides of every file in the patch (full-context hunks only)."""
    text = (patch or copy_patch_path()).read_bytes()
    body = text.split(b"\n-- \n")[0]  # drop the format-patch signature
    files: dict[str, FilePatch] = {}
    chunks = re.split(rb"^diff --git ", body, flags=re.M)[1:]
    for chunk in chunks:
        lines = chunk.split(b"\n")
        m = re.match(rb"a/(\S+) b/(\S+)", lines[0])
        path = m.group(2).decode()
        idx = next(l for l in lines if l.startswith(b"index "))
        old_blob, new_blob = re.match(rb"index ([0-9a-f]+)\.\.([0-9a-f]+)", idx).groups()
        hunks = [i for i, l in enumerate(lines) if l.startswith(b"@@")]
        if len(hunks) != 1:
            raise ValueError(f"{path}: expected one full-context hunk, got {len(hunks)}")
        h = _HUNK.match(lines[hunks[0]])
        old_start, old_len = int(h.group(1)), int(h.group(2) or 1)
        new_start, new_len = int(h.group(3)), int(h.group(4) or 1)
        if old_start not in (0, 1) or new_start not in (0, 1):
            raise ValueError(f"{path}: hunk does not start at line 1 (not full context)")
        old: list[bytes] = []
        new: list[bytes] = []
        old_eol = new_eol = True
        last = None
        for line in lines[hunks[0] + 1 :]:
            if len(old) == old_len and len(new) == new_len and not line.startswith(b"\\"):
                break
            if line.startswith(b"\\"):  # "\ No newline at end of file"
                if last in (b" ", b"-"):
                    old_eol = False
                if last in (b" ", b"+"):
                    new_eol = False
                continue
            tag, content = line[:1], line[1:]
            last = tag
            if tag in (b" ", b"-"):
                old.append(content)
            if tag in (b" ", b"+"):
                new.append(content)
        if len(old) != old_len or len(new) != new_len:
            raise ValueError(f"{path}: hunk lengths do not add up")
        old_bytes = b"\n".join(old) + (b"\n" if old and old_eol else b"")
        new_bytes = b"\n".join(new) + (b"\n" if new and new_eol else b"")
        files[path] = FilePatch(path, old_blob.decode(), new_blob.decode(), old_bytes, new_bytes)
    return files


def write_tree(dest: Path, side: str, patch: Path | None = None) -> Path:
    """Write the pre-image (side='old') or post-image (side='new') files under dest."""
    for fp in parse(patch).values():
        out = dest / fp.path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(fp.old if side == "old" else fp.new)
    return dest


def import_ext():
    """Import sgl_kernel_ext: an installed copy first (it has the prebuilt _C),
    else the source tree (sgl_kernel_ext/python; it then needs load_jit())."""
    import importlib
    import sys

    try:
        mod = importlib.import_module("sgl_kernel_ext")
        if hasattr(mod, "ensure_loaded"):
            return mod
    except ImportError:
        pass
    # not installed (or only the repo's top-level directory, a namespace package)
    sys.modules.pop("sgl_kernel_ext", None)
    sys.path.insert(0, str(EXT_DIR / "python"))
    return importlib.import_module("sgl_kernel_ext")
