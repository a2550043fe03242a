"""sglang's own plugin loader and the DeepGEMM runner's two callers, without the rest of sglang.

The benchmark times the callers as a server runs them: after
``sglang.srt.plugins.load_plugins()`` has run the installed plugins (sgl_kernel_ext's
entry point) and ``HookRegistry.apply_hooks()`` has installed their hooks. Importing
sglang itself needs its whole dependency set (and a GPU build of sgl-kernel), so this
module lays out only what that path runs, from a sglang tree (``build/trees/sglang/python``,
the pinned wheel's files plus the series):

- ``sglang.srt.plugins`` (``__init__.py``, ``hook_registry.py``) and
  ``sglang.srt.environ``, the wheel's files as they are, executed as modules of
  empty package shells (``sglang``, ``sglang.srt``: their ``__init__`` imports the server);
- ``sglang.srt.layers.moe.moe_runner.deep_gemm``: a module holding only the callers'
  own source (``copy_list_to_gpu_no_ce``, ``copy_list_to_gpu`` and the lookup helper
  the DeepGEMM caller patch adds), cut out of ``deep_gemm.py`` with ``ast``, since the
  whole module imports Triton kernels and sglang's distributed stack;
- ``sgl_kernel.elementwise.copy_to_gpu_no_ce``: stock sgl-kernel's tensor op, standing
  in for the CUDA library (here: ``stock_op``), with no list op, as in sgl-kernel 0.4.10.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

CALLER_MODULE = "sglang.srt.layers.moe.moe_runner.deep_gemm"
CALLERS = ("_sgl_kernel_copy_list_to_gpu_no_ce", "copy_list_to_gpu_no_ce", "copy_list_to_gpu")
_PRELUDE = "import functools\nfrom typing import List\n\nimport torch\n\n"


def caller_source(deep_gemm_py: Path) -> str:
    """The callers' source, decorators included, in file order."""
    src = deep_gemm_py.read_text()
    lines = src.splitlines(keepends=True)
    parts = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.FunctionDef) and node.name in CALLERS:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            parts.append("".join(lines[start - 1 : node.end_lineno]))
    return _PRELUDE + "\n\n".join(parts)


def _shell(name: str, path: Path | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)] if path else []
    sys.modules[name] = module
    return module


def install(sglang_root: Path, stock_op) -> types.ModuleType:
    """Lay the path out in sys.modules (see the module docstring); returns the runner's
    module. ``sglang_root`` holds ``sglang/`` (e.g. build/trees/sglang/python)."""
    pkg = Path(sglang_root) / "sglang"
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe"):
        _shell(name, pkg.parent / name.replace(".", "/"))
    _shell("sglang.srt.layers.moe.moe_runner")
    runner = types.ModuleType(CALLER_MODULE)
    runner.__file__ = str(pkg / "srt/layers/moe/moe_runner/deep_gemm.py")
    exec(compile(caller_source(Path(runner.__file__)), runner.__file__, "exec"), runner.__dict__)
    sys.modules[CALLER_MODULE] = runner
    kernel = _shell("sgl_kernel")
    elementwise = types.ModuleType("sgl_kernel.elementwise")
    elementwise.copy_to_gpu_no_ce = stock_op
    kernel.elementwise = elementwise
    kernel.copy_to_gpu_no_ce = stock_op
    sys.modules["sgl_kernel.elementwise"] = elementwise
    return runner


def load_plugins() -> dict:
    """sglang's own ``load_plugins()``; returns the targets its registry patched."""
    from sglang.srt.plugins import load_plugins as sglang_load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    sglang_load_plugins()
    return {target: [h[0].value for h in hooks] for target, hooks in HookRegistry._hooks.items()}
