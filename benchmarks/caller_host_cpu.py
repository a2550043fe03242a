#!/usr/bin/env python3
"""The host cost of the DeepGEMM runner's copy_list_to_gpu_no_ce itself, on a CPU.

caller_bench.py measures the callers on a GPU, real kernels included. This measures what the
callers add around the op, where no GPU is at hand: stock's caller (build/trees `upstream`) over
a stand-in op with every length (the kernel fix) and the patched caller (`HEAD`) over a stand-in
op with the released lengths (32/64/72; the KT fork's 64/72): tests/copy_list_probe.py's
`released_op`, the kernel's checks and a CPU copy, over the callers as caller_bench.py cuts them
out of deep_gemm.py. CPU seconds of this process
(time.process_time: another process's load does not count), the least of --blocks blocks of
--calls calls, per N. A GPU call adds the op's own host cost once per launch (caller_bench.py's
"post-image op alone").
  python benchmarks/caller_host_cpu.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
import caller_bench  # noqa: E402

from copy_list_probe import released_op  # noqa: E402

NS = (16, 17, 32, 64, 72, 73, 128, 256, 512)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blocks", type=int, default=25)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--out")
    args = p.parse_args(argv)
    import torch

    sk = caller_bench.SglKernel()
    empty_like = torch.empty_like
    torch.empty_like = lambda t, device=None: empty_like(t)  # no CUDA here: outputs on the CPU
    launches: list = []
    every = released_op("every", launches)
    report = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "rows": {}}
    for tree, released in (("sglang", (32, 64, 72)), ("sglang-kt", (64, 72))):
        stock, patched = (caller_bench.caller(tree, rev)[0] for rev in ("upstream", "HEAD"))
        methods = {
            "stock caller, every length": (stock, every),
            "patched caller, released": (patched, released_op(released, launches)),
        }
        for n in NS:
            values = list(range(n))
            row = {}
            for name, (fn, op) in methods.items():
                sk.use(op)
                fn(values)
                launches.clear()
                fn(values)
                row[f"{name}: launches"] = len(launches)
                best = float("inf")
                for _ in range(args.blocks):
                    t0 = time.process_time_ns()
                    for _ in range(args.calls):
                        fn(values)
                    best = min(best, (time.process_time_ns() - t0) / args.calls / 1000)
                row[f"{name}: us"] = round(best, 2)
            report["rows"][f"{tree} N={n}"] = row
            print(f"{tree} N={n}", row, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
