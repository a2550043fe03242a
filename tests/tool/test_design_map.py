"""docs/DESIGN.md's map of the tool is the code's: one row per module of python/sgl_overlay (its subpackages'
modules by their own names), each module importing only modules below its row, and each "called by" cell exactly
the modules that import it; and the subpackages' layers point one way: `engine` imports neither `builds` nor
`maint`, `builds` does not import `maint`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "sgl_overlay"
DESIGN = REPO / "docs" / "DESIGN.md"
ANY_ABOVE = "any module above"


SUBPACKAGES = ("engine", "builds", "maint")  # each may import only those before it


def paths() -> dict[str, Path]:
    """Each module by its name (unique across the subpackages), to its file; a subpackage's `__init__` holds
    only its docstring and is not one."""
    found = {p.stem: p for p in PACKAGE.glob("*.py")}
    for sub in SUBPACKAGES:
        found.update((p.stem, p) for p in (PACKAGE / sub).glob("*.py") if p.stem != "__init__")
    return found


def modules() -> list[str]:
    return sorted(paths())


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(source: str, known: list[str], typing: bool = False) -> set[str]:
    """The package's modules that `source` imports at run time (anywhere but under `if TYPE_CHECKING:`; with
    `typing`, there too); `from sgl_overlay import x` (or `from sgl_overlay.engine import x`) is module x, or
    `__init__` for a name defined there; `sgl_overlay.engine.x` is module x."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child) and not typing:
                continue
            if isinstance(child, ast.ImportFrom) and (child.module or "").split(".")[0] == "sgl_overlay":
                if child.module.split(".")[1:] in ([], *([s] for s in SUBPACKAGES)):
                    found.update(a.name if a.name in known else "__init__" for a in child.names)
                else:
                    found.add(child.module.split(".")[-1])
            elif isinstance(child, ast.Import):
                found.update(a.name.split(".")[-1] for a in child.names if a.name.startswith("sgl_overlay."))
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph(typing: bool = False) -> dict[str, set[str]]:
    files = paths()
    return {m: imports(path.read_text(), sorted(files), typing) - {m} for m, path in files.items()}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` as the modules along it, first and last the same ([] when there is none)."""
    done: set[str] = set()

    def walk(mod: str, path: list[str]) -> list[str]:
        if mod in path:
            return path[path.index(mod) :] + [mod]
        if mod in done:
            return []
        for dep in sorted(graph.get(mod, ())):
            found = walk(dep, [*path, mod])
            if found:
                return found
        done.add(mod)
        return []

    return next((found for mod in sorted(graph) if (found := walk(mod, []))), [])


def parse_map(text: str) -> list[tuple[str, set[str] | None]]:
    """The map's rows in order: (module, its callers), callers None for "any module above"."""
    section = text.split("## Map of the tool", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("module", "---"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        assert len(names) == 1, f"the map has one module per row, not {cells[0]}"
        name = names[0]
        rows.append((name, None if cells[2] == ANY_ABOVE else set(re.findall(r"`([^`]+)`", cells[2]))))
    return rows


def check_map(rows: list[tuple[str, set[str] | None]], graph: dict[str, set[str]]) -> list[str]:
    """Every way the map is not the code: a module missing or listed twice or unknown, an import of a module
    that is not below, a "called by" cell that is not exactly the importers."""
    order = [name for name, _ in rows]
    problems = [f"{m} is not in the map" for m in sorted(graph.keys() - set(order))]
    problems += [f"{m} is in the map but not in the package" for m in sorted(set(order) - graph.keys())]
    problems += [f"{m} has two rows" for m in sorted({m for m in order if order.count(m) > 1})]
    if problems:
        return problems
    rank = {name: i for i, name in enumerate(order)}
    for mod, deps in sorted(graph.items()):
        problems += [f"{mod} imports {d}, which is not below it" for d in sorted(deps) if rank[d] <= rank[mod]]
    for name, callers in rows:
        importers = {m for m, deps in graph.items() if name in deps}
        if callers is not None and callers != importers:
            problems.append(f"{name} is called by {sorted(importers)}, the map says {sorted(callers)}")
    return problems


def test_the_map_is_the_code():
    assert check_map(parse_map(DESIGN.read_text()), import_graph()) == []


def test_no_import_cycle():
    """No module reaches itself through its imports, a type checker's (`if TYPE_CHECKING:`) included: a cycle
    of types alone is one that a run-time import turns into an import that fails."""
    assert cycle(import_graph(typing=True)) == []


def layer_problems(graph: dict[str, set[str]], layer: dict[str, str]) -> list[str]:
    """Each import of a module in a later subpackage (SUBPACKAGES order) than the importer's own."""
    rank = {sub: i for i, sub in enumerate(SUBPACKAGES)}
    return [
        f"{layer[m]}.{m} imports {layer[d]}.{d}"
        for m, deps in sorted(graph.items())
        if m in layer
        for d in sorted(deps)
        if d in layer and rank[layer[d]] > rank[layer[m]]
    ]


def test_the_layers_point_one_way():
    """engine -> nothing of builds or maint; builds -> nothing of maint (types included)."""
    layer = {m: p.parent.name for m, p in paths().items() if p.parent.name in SUBPACKAGES}
    assert set(layer.values()) == set(SUBPACKAGES)
    assert layer_problems(import_graph(typing=True), layer) == []


def test_an_import_against_the_layers_is_named():
    layer = {"operations": "engine", "tree": "builds", "pins": "maint"}
    graph = {"operations": {"tree"}, "tree": {"pins", "operations"}, "pins": {"operations", "tree"}}
    assert layer_problems(graph, layer) == ["engine.operations imports builds.tree", "builds.tree imports maint.pins"]


def test_a_cycle_is_found():
    graph = {"doctor": {"wheels"}, "wheels": {"fetch"}, "fetch": {"wording"}, "wording": {"doctor", "errors"}}
    assert cycle(graph) == ["doctor", "wheels", "fetch", "wording", "doctor"]
    assert cycle({"prs": {"wording"}, "wording": {"prs"}}) == ["prs", "wording", "prs"]
    assert cycle({**graph, "wording": {"errors"}, "errors": set()}) == []


def test_the_import_graph_is_read_right():
    known = ["cli", "errors", "states", "gitutil", "tree", "__init__"]
    source = (
        "from typing import TYPE_CHECKING\n"
        "from sgl_overlay import __version__\n"
        "from sgl_overlay.engine import states\n"
        "import sgl_overlay.engine.gitutil\n"
        "if TYPE_CHECKING:\n    from sgl_overlay.cli import main\n"
        "def f():\n    from sgl_overlay.errors import OverlayError\n"
        "    from sgl_overlay.builds.tree import BASE_TAG\n"
    )
    assert imports(source, known) == {"__init__", "states", "gitutil", "errors", "tree"}
    assert imports(source, known, typing=True) == {"__init__", "states", "gitutil", "errors", "tree", "cli"}


ROWS = [("cli", {"__main__"}), ("__main__", set()), ("wording", {"cli"}), ("errors", None)]
GRAPH = {"__main__": {"cli"}, "cli": {"wording", "errors"}, "wording": {"errors"}, "errors": set()}


@pytest.mark.parametrize(
    ("rows", "graph", "problem"),
    [
        (ROWS[1:], {**GRAPH, "__main__": set()}, "cli is not in the map"),
        (ROWS + [("old", set())], GRAPH, "old is in the map but not in the package"),
        (ROWS, GRAPH, "__main__ imports cli, which is not below it"),
        (
            [ROWS[1], ROWS[0], ROWS[2], ("errors", {"cli"})],
            GRAPH,
            "errors is called by ['cli', 'wording'], the map says ['cli']",
        ),
        (
            [ROWS[1], ROWS[0], ("wording", {"cli", "matrix"}), ROWS[3]],
            GRAPH,
            "wording is called by ['cli'], the map says",
        ),
    ],
    ids=["module-missing", "module-gone", "not-below", "callers-stale", "caller-gone"],
)
def test_a_drifted_map_is_named(rows, graph, problem):
    """The check names each way a map can drift from the code (here on a small made-up package)."""
    found = check_map(rows, graph)
    assert any(p.startswith(problem) for p in found), found
    assert check_map([ROWS[1], ROWS[0], ROWS[2], ROWS[3]], GRAPH) == []
