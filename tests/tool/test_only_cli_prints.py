"""Only the command line prints: every other module returns its lines (a report's `lines()`, an error's
message) or hands progress lines to the `log` it is given."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "sgl_overlay"
# the command line: cli, and its way in (__main__) for what it says before cli has loaded
PRINTERS = ("cli", "__main__")


def prints(source: str) -> list[int]:
    """The lines of `source` that call print or write to sys.stdout / sys.stderr."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = ast.unparse(node.func)
        if f == "print" or f in ("sys.stdout.write", "sys.stderr.write"):
            found.append(node.lineno)
    return found


def test_only_the_command_line_prints():
    hits = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.stem not in PRINTERS and "patches" not in path.relative_to(PACKAGE).parts
        for line in prints(path.read_text())
    ]
    assert hits == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('print(f"built {path}", flush=True)', [1]),
        ("import sys\nsys.stderr.write(line)", [2]),
        ('log(f"fetch {name}: downloading")', []),
        ('SCRIPT = "print(json.dumps(x))"', []),
    ],
)
def test_a_print_is_found(source, found):
    assert prints(source) == found
