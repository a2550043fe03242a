"""Probe (CPU machine, no GPU): the list entry points' argument reading and refusals
against stock's caller, over tests/kernel/list_inputs.py.

- ``read``: ``_C.read_values``, the ints the one-launch path copies, or None where it
  hands the call on; the reference is stock's ``torch.tensor(values, dtype=torch.int32)``.
- ``wrapper`` / ``no_ce_caller`` / ``pinned_caller``: ``sgl_kernel_ext.copy_list_to_gpu_no_ce``
  and the plugin's replacements of sglang's two callers, against the callers they stand
  for; without a GPU every accepted input ends at torch's CUDA initialisation error and
  every refused one at stock's own error, so the outcomes (type and message) must agree.
- ``dispatcher``: ``torch.ops.sgl_kernel_ext.copy_list_to_gpu_no_ce`` (torch's int[]
  parser), recorded against the same reference.

PYTHONPATH: the built extension first. Prints one JSON line.
"""

import json

import list_inputs
import numpy as np
import torch

import sgl_kernel_ext
from sgl_kernel_ext import _copy_list_through_tensor

C = sgl_kernel_ext._extension_module()  # loads the extension


def stock_tensor(values):
    return torch.tensor(values, dtype=torch.int32, device="cpu")


def read(values):
    got = C.read_values(values)
    if got is None:
        raise LookupError("handed on")
    return torch.tensor(got, dtype=torch.int32)


def stock_pinned(values):
    return torch.tensor(values, dtype=torch.int32, pin_memory=True, device="cpu").cuda(non_blocking=True)


def stock_no_ce(values):
    return _copy_list_through_tensor(values)


entry_points = {
    "read": (read, stock_tensor),
    "wrapper": (sgl_kernel_ext.copy_list_to_gpu_no_ce, stock_no_ce),
    "no_ce_caller": (sgl_kernel_ext.list_copier(stock_no_ce), stock_no_ce),
    "pinned_caller": (sgl_kernel_ext.list_copier(stock_pinned), stock_pinned),
    "dispatcher": (torch.ops.sgl_kernel_ext.copy_list_to_gpu_no_ce, stock_no_ce),
}
rows = list_inputs.differential(entry_points, list_inputs.cases(torch, np))
print(json.dumps({"rows": rows, "summary": list_inputs.summary(rows), "cuda": torch.cuda.is_available()}))
