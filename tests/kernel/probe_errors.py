"""Probe (device diagnosis): call the op with one bad input, print the error.
argv: case namespace. Each case runs in its own process so a crash names it."""

import os
import sys

import torch

import kernel_patch as kp

case, ns = sys.argv[1], sys.argv[2]
ext = kp.import_ext()
if ns == "sgl_kernel_ext":
    jit_dir = os.environ.get("SGL_KERNEL_EXT_JIT_DIR")  # a load_jit() build instead of _C
    ext.load_jit(build_directory=jit_dir) if jit_dir else ext.ensure_loaded()
op = getattr(torch.ops, ns).copy_to_gpu_no_ce
cases = {
    "n0": (torch.zeros(0, dtype=torch.int32), torch.empty(0, dtype=torch.int32, device="cuda")),
    "n513": (torch.zeros(513, dtype=torch.int32), torch.empty(513, dtype=torch.int32, device="cuda")),
    "int64_16": (torch.zeros(16, dtype=torch.int64), torch.empty(16, dtype=torch.int32, device="cuda")),
    "mismatch_16": (torch.zeros(16, dtype=torch.int32), torch.empty(17, dtype=torch.int32, device="cuda")),
    "n18": (torch.zeros(18, dtype=torch.int32), torch.empty(18, dtype=torch.int32, device="cuda")),
}
x, y = cases[case]
try:
    op(x, y)
    torch.cuda.synchronize()
    print(case, ns, "no error")
except RuntimeError as exc:
    print(case, ns, "RuntimeError:", str(exc).splitlines()[0])
