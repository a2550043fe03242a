#!/usr/bin/env python3
"""Launches the exact and the forced fallback kernel --launches times each at
N = 16/32/64/72, for Nsight Compute to time on the device:

  ncu --clock-control none --metrics gpu__time_duration.sum -k regex:copy_to_gpu_no_ce \
      --csv python benchmarks/ncu_kernels.py
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1] / "sgl_kernel_ext" / "python"))
import sgl_kernel_ext  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--launches", type=int, default=20)
args = p.parse_args()
sgl_kernel_ext.ensure_loaded()
ops = torch.ops.sgl_kernel_ext
for n in (16, 32, 64, 72):
    x = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32)
    y = torch.empty(n, dtype=torch.int32, device="cuda")
    for _ in range(args.launches):
        ops.copy_to_gpu_no_ce(x, y)
        ops.copy_to_gpu_no_ce_fallback(x, y)
    torch.cuda.synchronize()
    assert y.cpu().tolist() == x.tolist()
print("ok")
