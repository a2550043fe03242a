"""The manifest's `preimages` tables: a lock of what the series says (Series.preimages), checked when
the manifest loads and rewritten from the series by `sgl-overlay pins` (and `export`)."""

from __future__ import annotations

import re
from pathlib import Path

from sgl_overlay.engine.manifest import Manifest, Target
from sgl_overlay.engine.series import Series, same_blob


def check(manifest: Manifest) -> dict[str, Series]:
    """Refuse (one line naming the file and the command that fixes it) a table the series disagrees with;
    each target's series, as read for the check (the command goes on with them)."""
    read = {name: Series.read(target) for name, target in manifest.targets.items()}
    for series in read.values():
        series.check_lock()
    return read


def _table(target: Target, preimages: dict[str, str]) -> str:
    rows = "".join(f'"{path}" = "{blob}"\n' for path, blob in preimages.items())
    return f"[targets.{target.name}.preimages]\n{rows}"


def rewrite(manifest: Manifest, only: list[Target] | None = None) -> list[tuple[str, int]]:
    """Write each target's table from its series into manifest.toml (nothing else in the file changes);
    (target, pre-images) of each table that changed."""
    text = manifest.path.read_text()
    written = []
    for target in only or manifest.targets.values():
        want = Series.read(target).preimages()
        if want.keys() == target.preimages.keys() and all(same_blob(b, target.preimages[p]) for p, b in want.items()):
            continue
        header = re.compile(rf"^\[targets\.{re.escape(target.name)}\.preimages\]\n(?:(?!\[)[^\n]*\n)*", re.M)
        table = _table(target, want)
        m = header.search(text)
        if m is None:
            text = text.rstrip("\n") + "\n\n" + table
        else:  # the blank lines and comments that lead into the next table stay
            text = text[: m.start()] + table + _trailing(m.group(0)) + text[m.end() :]
        written.append((target.name, len(want)))
    if written:
        manifest.path.write_text(text)
    return written


def _trailing(body: str) -> str:
    """The blank and comment lines at the end of a table's block, which belong to what follows it."""
    keep = []
    for line in reversed(body.splitlines(keepends=True)):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        keep.append(line)
    return "".join(reversed(keep))


def lines(manifest: Path, written: list[tuple[str, int]]) -> list[str]:
    """What `pins` (and `export`) print: each table rewritten, or that none needed it."""
    done = [f"pins {name}: {count} pre-image(s) written to {manifest}" for name, count in written]
    return done or [f"pins: {manifest} already matches the series"]
