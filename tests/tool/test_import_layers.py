"""python/sgl_overlay's imports: no cycle, and the subpackages' layers point one way: `engine` imports neither
`builds` nor `maint`, `builds` does not import `maint` (docs/DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "sgl_overlay"


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
