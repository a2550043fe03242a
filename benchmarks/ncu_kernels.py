#!/usr/bin/env python3
"""Launches the exact and the forced fallback kernel --launches times each at
N = 16/32/64/72, for Nsight Compute to time on the device:

  ncu --clock-control none --metrics gpu__time_duration.sum -k regex:copy_to_gpu_no_ce \
      --csv python benchmarks/ncu_kernels.py > ncu_kernels.csv
  python benchmarks/ncu_kernels.py --summarize ncu_kernels.csv    # Markdown table, no GPU
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

SIZES = (16, 32, 64, 72)


def summarize(path: str) -> str:
    """Per N and kernel: median [min, max] of gpu__time_duration.sum, ns. The launches
    come in the order below (N by N), each N's block size is N threads."""
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = [r for r in csv.DictReader(lines) if r["Metric Name"] == "gpu__time_duration.sum"]
    out = ["| N | kernel | launches | median ns | min | max |", "|---|---|---|---|---|---|"]
    for n in SIZES:
        by_kernel: dict[str, list[float]] = {}
        for r in rows:
            if r["Block Size"] == f"({n}, 1, 1)":
                name = "fallback" if "fallback" in r["Kernel Name"] else f"exact<{n}>"
                by_kernel.setdefault(name, []).append(float(r["Metric Value"].replace(",", "")))
        for name, ns in by_kernel.items():
            out.append(f"| {n} | {name} | {len(ns)} | {statistics.median(ns):.0f} | {min(ns):.0f} | {max(ns):.0f} |")
    return "\n".join(out)


p = argparse.ArgumentParser()
p.add_argument("--launches", type=int, default=20)
p.add_argument("--summarize", metavar="CSV")
args = p.parse_args()
if args.summarize:
    print(summarize(args.summarize))
    sys.exit(0)

import torch  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1] / "sgl_kernel_ext" / "python"))
import sgl_kernel_ext  # noqa: E402

sgl_kernel_ext.ensure_loaded()
ops = torch.ops.sgl_kernel_ext
for n in SIZES:
    x = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32)
    y = torch.empty(n, dtype=torch.int32, device="cuda")
    for _ in range(args.launches):
        ops.copy_to_gpu_no_ce(x, y)
        ops.copy_to_gpu_no_ce_fallback(x, y)
    torch.cuda.synchronize()
    assert y.cpu().tolist() == x.tolist()
print("ok")
