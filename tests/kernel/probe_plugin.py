"""Probe: sglang 0.5.23's real plugin loader with sgl_kernel_ext's entry point.

PYTHONPATH: the stock sglang root, a dir with a stand-in `sgl_kernel` (the real one
is a CUDA library that cannot load on a CPU) and the extension's dist-info, the
extension's python dir. argv[1] == "twice": run the plugins a second time, as a
loader without sglang's own once-guard would. Prints one JSON line.
"""

import ast
import json
import logging
import sys

import sgl_kernel
import sgl_kernel.elementwise
import torch

import sgl_kernel_ext

calls = []
sgl_kernel_ext.copy_to_gpu_no_ce = lambda i, o: calls.append("ext")  # the op needs a GPU
list_calls = []


def list_copier(original):  # likewise; a Python class standing in for the C type it makes
    class Copier:
        __wrapped__ = original

        def __new__(cls, arr):
            list_calls.append(list(arr))
            return "fast"

    return Copier


sgl_kernel_ext.list_copier = list_copier

import sglang.srt.plugins  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: E402


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


warnings = Warnings()
logging.getLogger().addHandler(warnings)
# in a list: the loader re-points module attributes that hold the original
stock_fn = [sgl_kernel.elementwise.copy_to_gpu_no_ce]
from sglang.srt.layers.moe.moe_runner import deep_gemm  # noqa: E402

stock_pinned = [getattr(deep_gemm, "copy_list_to_gpu", None)]
stock_no_ce = [deep_gemm.copy_list_to_gpu_no_ce]
load_plugins()
if sys.argv[1:] == ["twice"]:
    sglang.srt.plugins._plugins_loaded = False
    load_plugins()

x = torch.zeros(4, dtype=torch.int32)
from sgl_kernel.elementwise import copy_to_gpu_no_ce  # noqa: E402  (as the caller does)

copy_to_gpu_no_ce(x, x)
sgl_kernel.copy_to_gpu_no_ce(x, x)

# sglang's caller binds the name inside the function, at each call.
import sglang  # noqa: E402

path = sglang.__path__[0] + "/srt/layers/moe/moe_runner/deep_gemm.py"
tree = ast.parse(open(path).read())
fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "copy_list_to_gpu_no_ce")
imports = [(n.module, [a.name for a in n.names]) for n in ast.walk(fn) if isinstance(n, ast.ImportFrom)]

list_results = []
callers = [(deep_gemm.copy_list_to_gpu_no_ce, [1, 2, 3])]
if hasattr(deep_gemm, "copy_list_to_gpu"):  # the patched sglang (the DeepGEMM caller patch)
    callers.append((deep_gemm.copy_list_to_gpu, [4] * 512))
for fn, arr in callers:
    try:
        list_results.append(fn(arr))
    except Exception as exc:  # the unhooked callers need CUDA
        list_results.append(type(exc).__name__)
# a REPLACE class is installed as it is (a function would be wrapped in a Python frame)
callers_are_types = [isinstance(fn, type) for fn, _ in callers]
no_ce_wraps_stock = getattr(deep_gemm.copy_list_to_gpu_no_ce, "__wrapped__", None) is stock_no_ce[0]
pinned_wraps_stock = getattr(getattr(deep_gemm, "copy_list_to_gpu", None), "__wrapped__", None) is stock_pinned[0]
print(
    json.dumps(
        {
            "calls": calls,
            "list_calls": list_calls,
            "list_results": list_results,
            "stock_calls": sgl_kernel.elementwise.STOCK_CALLS,
            "replaced": sgl_kernel.elementwise.copy_to_gpu_no_ce is not stock_fn[0],
            "caller_imports": imports,
            "hooks": {target: len(hooks) for target, hooks in HookRegistry._hooks.items()},
            "callers_are_types": callers_are_types,
            "no_ce_wraps_stock": no_ce_wraps_stock,
            "pinned_wraps_stock": None if stock_pinned[0] is None else pinned_wraps_stock,
            "warnings": warnings.messages,
        }
    )
)
