"""The tool's temporary folders: named for the process that made them, removed on every exit
path, and swept by a later run when the process that made them was killed."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

PREFIX = "sgl-overlay-"
_OWNED = re.compile(rf"^{PREFIX}(\d+)-")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def mkdtemp(kind: str) -> str:
    """A new folder `sgl-overlay-<pid>-<kind>-…` in the temp folder; the caller removes it."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{kind}-")


@contextlib.contextmanager
def folder(kind: str) -> Iterator[str]:
    path = mkdtemp(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep() -> list[str]:
    """Remove the folders of tool processes that no longer run (a SIGKILLed run); returns them."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    gone = []
    for name in names:
        m = _OWNED.match(name)
        path = os.path.join(root, name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            try:
                if os.stat(path).st_uid != os.getuid():
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone
