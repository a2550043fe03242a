"""No module of the tool but `wording` builds a sentence it prints or raises: a string with a space in it
(a literal or an f-string) passed to print, to a progress log, or to an error's constructor fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "sgl_overlay"
SAYS = {"print", "log", "OverlayError", "UsageError", "Interrupted", "ArgumentTypeError"}
# cli's line for Ctrl-C while the modules (wording among them) are still loading.
ALLOWED = {("cli", "sgl-overlay: interrupted while starting; nothing was changed")}


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _texts(node: ast.AST) -> list[str]:
    """The literal strings `node` builds (an f-string as one, `{}` for each value), not looking into the
    arguments of a call inside it (what that call is given is its business)."""
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call):
        return _texts(node.func)
    return [t for child in ast.iter_child_nodes(node) for t in _texts(child)]


def _sentences(node: ast.AST) -> list[str]:
    """The texts with a word and a space in them."""
    return [t for t in _texts(node) if re.search(r"[A-Za-z]", t) and re.search(r"\s", t)]


def prose(module: str, source: str) -> list[str]:
    """`module:line: text` of each sentence built for print, a log or an error."""
    hits = []
    for call in ast.walk(ast.parse(source)):
        if isinstance(call, ast.Call) and _callee(call) in SAYS:
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                hits += [f"{module}:{call.lineno}: {t}" for t in _sentences(arg) if (module, t) not in ALLOWED]
    return hits


def test_no_module_but_wording_builds_sentences():
    hits = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.stem != "wording":
            hits += prose(path.stem, path.read_text())
    assert hits == []


@pytest.mark.parametrize(
    "source",
    [
        'raise OverlayError(f"no tree for {name}; run fetch")',
        'raise errors.UsageError("unknown target, see --help")',
        'print(f"built {path} in {s} s", flush=True)',
        'self.log("matrix: " + ", ".join(parts))',
        'raise Interrupted(f"terminated by signal {n}")',
    ],
)
def test_a_sentence_is_found(source):
    assert prose("m", source)


@pytest.mark.parametrize(
    "source",
    [
        "raise OverlayError(Why.NO_TREE, target=name, path=path)",
        "print(wording.built(path), flush=True)",
        'print("\\n".join(lines))',
        'log(f"{a}:{b}")',
        'subproc.run(["git", "am"], f"git am in {repo}")',
    ],
)
def test_data_is_not_a_sentence(source):
    assert prose("m", source) == []
