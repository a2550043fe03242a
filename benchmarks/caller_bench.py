#!/usr/bin/env python3
"""The DeepGEMM runner's copy_list_to_gpu_no_ce over the released kernels, on a GPU.

Builds, as torch extensions (tests/kernel/copy_ext.py), the copy.cu files of
build/trees: sgl-kernel's pre-image (kernels for N = 32, 64, 72; the one sglang-kernel
0.4.10 ships), the KT fork's (64, 72) and the series' post-image (every N up to 512).
Runs the runner's caller as the trees hold it, cut out of deep_gemm.py with ast (the
module itself imports Triton and sglang's distributed stack): stock's (`upstream`) and
the patched one (HEAD) of sglang and of sglang-kt, with `sgl_kernel.elementwise`
standing in for sgl-kernel's Python package over each built op.

- correctness: every N in 1..513, random full-range int32 values: wrong values,
  refusals, launches (op calls per caller call; the profiler counts the kernels at a
  few N); tests/kernel/list_inputs.py's special inputs against stock's answer (stock's
  own outcome, or the values where stock only lacked a kernel for the length).
- host µs per call: B paired blocks, every method --calls calls per block in an order
  shuffled with a fixed seed; the median over blocks. Methods: the patched caller over
  the stock and the KT kernel, stock's caller over them (at their own lengths), stock's
  caller over the post-image (the kernel fix), sgl_kernel_ext's one-launch list path
  when it is installed, with --previous REV sglang's caller at REV over the stock kernel
  (a change to the caller timed beside the one it replaces), and the post-image op
  alone (exact and fallback lengths) with the kernels' device time (profiler).

Exit status 1 when a patched caller gives a wrong value or refuses an N in 1..512.
  python benchmarks/caller_bench.py --out-dir DIR [--build-dir DIR] [--previous REV]
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import json
import platform
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "kernel")]
TREES = ROOT / "build" / "trees"
COPY_CU = "sgl-kernel/csrc/elementwise/copy.cu"
DEEP_GEMM = "python/sglang/srt/layers/moe/moe_runner/deep_gemm.py"
KERNELS = {"stock": ("sgl-kernel", "upstream"), "kt": ("sgl-kernel-kt", "upstream"), "post": ("sgl-kernel", "HEAD")}
LENGTHS = {"stock": (32, 64, 72), "kt": (64, 72), "post": tuple(range(1, 513))}
TIMED_N = (1, 8, 16, 17, 32, 48, 63, 64, 65, 72, 73, 100, 128, 256, 384, 512)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


SOURCES: Path | None = None  # --sources: the files below, written by --write-sources


def _git(tree: str, *args: str) -> str:
    return subprocess.run(["git", "-C", str(TREES / tree), *args], capture_output=True, text=True).stdout.strip()


def git_show(tree: str, rev: str, path: str) -> bytes:
    if SOURCES is not None:
        return (SOURCES / f"{tree}@{rev}" / path).read_bytes()
    return subprocess.run(
        ["git", "-C", str(TREES / tree), "show", f"{rev}:{path}"], capture_output=True, check=True
    ).stdout


def write_sources(dest: Path, previous: str | None = None) -> None:
    """The files this benchmark reads from build/trees, for a machine without the trees."""
    wanted = [(t, r, COPY_CU) for t, r in KERNELS.values()]
    wanted += [(t, r, DEEP_GEMM) for t in ("sglang", "sglang-kt") for r in ("upstream", "HEAD")]
    if previous:
        wanted.append(("sglang", previous, DEEP_GEMM))
    for tree, rev, path in wanted:
        file = dest / f"{tree}@{rev}" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(git_show(tree, rev, path))
    info = {
        "trees": {f"{t}@{r}": _git(t, "log", "--oneline", "-1", r) for t, r in {(t, r) for t, r, _ in wanted}},
        "blobs": {f"{t}@{r}:{p}": _git(t, "rev-parse", f"{r}:{p}") for t, r, p in wanted},
    }
    (dest / "trees.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


def _top_level_names(node) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    return []


def caller(tree: str, rev: str):
    """copy_list_to_gpu_no_ce of one tree's deep_gemm.py, in a module with the module-level
    functions and constants it uses (the decorated ones with their decorators)."""
    src = git_show(tree, rev, DEEP_GEMM).decode()
    body = ast.parse(src).body
    defs = {name: n for n in body for name in _top_level_names(n)}
    wanted, todo = [], ["copy_list_to_gpu_no_ce"]
    while todo:
        node = defs[todo.pop()]
        if node in wanted:
            continue
        wanted.append(node)
        todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defs]
    wanted.sort(key=lambda n: n.lineno)
    segments = []
    for node in wanted:
        start = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno
        segments.append("\n".join(src.splitlines()[start - 1 : node.end_lineno]))
    # the module's own imports of the standard library and torch (the rest is sglang's)
    imports = [
        ast.get_source_segment(src, n)
        for n in body
        if isinstance(n, ast.Import | ast.ImportFrom)
        and (n.module or "" if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0]
        in (sys.stdlib_module_names - {"__future__"}) | {"torch"}
    ]
    module = types.ModuleType(f"caller_{tree}_{rev}")
    text = "\n\n\n".join(segments)
    exec(compile("\n".join(imports) + "\n\n\n" + text, f"{tree}@{rev}:{DEEP_GEMM}", "exec"), module.__dict__)
    return module.copy_list_to_gpu_no_ce, text


class SglKernel:
    """`sgl_kernel.elementwise` in sys.modules, its copy_to_gpu_no_ce switchable."""

    def __init__(self):
        self.elementwise = types.ModuleType("sgl_kernel.elementwise")
        package = types.ModuleType("sgl_kernel")
        package.elementwise = self.elementwise
        sys.modules.update({"sgl_kernel": package, "sgl_kernel.elementwise": self.elementwise})

    def use(self, fn):
        self.elementwise.copy_to_gpu_no_ce = fn


def counting(fn, launches: list):
    def copy_to_gpu_no_ce(input, output):
        launches.append(input.numel())
        fn(input, output)

    return copy_to_gpu_no_ce


def check_counts(torch, call, sk, wrapper, rng) -> dict:
    """Every N in 1..513 through call over one kernel: refused N, wrong N, launches per N."""
    launches: list = []
    sk.use(counting(wrapper, launches))
    try:  # a caller that learns the kernel's lengths on its first call does so here
        call([0])
    except RuntimeError:
        pass
    refused, wrong, per_n = [], [], {}
    for n in range(1, 514):
        values = [rng.randint(INT32_MIN, INT32_MAX) for _ in range(n)]
        launches.clear()
        try:
            out = call(values)
        except RuntimeError as exc:
            refused.append([n, str(exc).splitlines()[0]])
            continue
        ok = (
            out.dtype == torch.int32
            and out.device.type == "cuda"
            and out.is_contiguous()
            and tuple(out.shape) == (n,)
            and out.cpu().tolist() == values
        )
        if not ok:
            wrong.append(n)
        per_n[n] = list(launches)
    torch.cuda.synchronize()
    return {"refused": refused, "wrong": wrong, "launches": per_n}


def expected_outcome(torch, list_inputs, stock_call, make):
    """Stock's answer; where stock only lacked a kernel for a 1-D length, the values."""
    want = list_inputs.outcome(stock_call, make)
    if want[:3] == ("error", "RuntimeError", "unexpected N"):
        t = torch.tensor(make(), dtype=torch.int32)
        if t.dim() == 1 and t.numel() > 0:
            return ("ok", "torch.int32", (t.numel(),), t.tolist())
    return want


def special_inputs(torch, list_inputs, patched, stock_call, sk, wrapper, np) -> dict:
    sk.use(wrapper)
    rows, differ = {}, []
    for case, make in list_inputs.cases(torch, np).items():
        got = list_inputs.outcome(patched, make)
        want = expected_outcome(torch, list_inputs, stock_call, make)
        rows[case] = {"got": repr(got)[:300], "want": repr(want)[:300], "same": got == want}
        if got != want:
            differ.append(case)
    return {"cases": len(rows), "differ": differ, "rows": rows}


def kernel_launches(torch, call, sk, wrapper, n: int) -> int:
    """copy_to_gpu_no_ce kernels the profiler sees for one call at N."""
    from torch.profiler import ProfilerActivity, profile

    sk.use(wrapper)
    values = list(range(n))
    call(values)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(values)
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if "copy_to_gpu_no_ce" in e.name and e.device_type.name == "CUDA")


def op_device_us(torch, op, n: int, launches: int = 200) -> float:
    """Median device µs of the op's kernel at N (profiler)."""
    from torch.profiler import ProfilerActivity, profile

    src = torch.arange(n, dtype=torch.int32)
    dst = torch.empty(n, dtype=torch.int32, device="cuda")
    op(src, dst)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(launches):
            op(src, dst)
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if "copy_to_gpu_no_ce" in e.name and e.device_type.name == "CUDA"]
    return statistics.median(times) if times else float("nan")


def time_methods(torch, methods: dict, sk, n: int, blocks: int, calls: int, rng) -> dict:
    """methods: name -> (fn taking the values, sgl_kernel wrapper or None); host µs per call."""
    samples = {m: [] for m in methods}
    order = list(methods)
    for block in range(blocks + 1):  # block 0 warms up and is not recorded
        rng.shuffle(order)
        values = [rng.randint(0, 8191) for _ in range(n)]
        for name in order:
            fn, wrapper = methods[name]
            if wrapper is not None:
                sk.use(wrapper)
            fn(values)
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn(values)
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
            if block:
                samples[name].append((t1 - t0) / calls / 1000)
    return {
        m: {"median_us": statistics.median(s), "min_us": min(s), "max_us": max(s), "blocks_us": s}
        for m, s in samples.items()
    }


def machine(torch) -> dict:
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "driver": sh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
        "cpu": cpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvcc": sh("nvcc", "--version").splitlines()[-1:] and sh("nvcc", "--version").splitlines()[-1],
        "sources": json.loads((SOURCES / "trees.json").read_text()) if SOURCES else None,
    }


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# copy_list_to_gpu_no_ce over the released kernels ({m['gpu']})",
        "",
        f"- {m['date']}; {m['gpu']}, driver {m['driver']}; CPU {m['cpu']}; Python {m['python']}, torch {m['torch']} (CUDA {m['cuda']}), {m['nvcc']}",
        f"- trees and blobs read: {json.dumps(m['sources'])}",
        f"- host µs: {report['config']['blocks']} paired blocks × {report['config']['calls']} calls per method, order shuffled per block (seed {report['config']['seed']}), values 0..8191; median over blocks [min–max]",
        "",
        "## Correctness: N = 1..513, full-range int32 values",
        "",
        "| caller | kernel | refused N in 1..512 | refused at 513 | wrong values | launches per call (N ≤ 72 / 100 / 512) | special inputs differing from stock's answer |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, c in report["correctness"].items():
        refused = [r[0] for r in c["refused"]]
        in_range = [n for n in refused if n <= 512]
        la = c["launches"]
        launches = "/".join(
            str(len(la.get(n, la.get(str(n), [])))) if (n in la or str(n) in la) else "-" for n in (16, 100, 512)
        )
        special = report["special"].get(key)
        sp = (
            f"{len(special['differ'])} of {special['cases']}"
            + (f" ({', '.join(special['differ'])})" if special["differ"] else "")
            if special
            else "-"
        )
        shown = f"{len(in_range)}" + (
            f" (all but {sorted(set(range(1, 513)) - set(in_range))})"
            if 0 < len(in_range) and len(in_range) > 500
            else (f" ({in_range[:8]}…)" if in_range else "")
        )
        lines.append(
            f"| {key.split('@')[0]} | {key.split('@')[1]} | {shown} | {'yes' if 513 in refused else 'no'} | {len(c['wrong'])} | {launches} | {sp} |"
        )
    lines += ["", f"Kernels the profiler counts per call (patched caller): {report['profiled_launches']}", ""]
    methods = list(dict.fromkeys(m for res in report["timing"].values() for m in res))
    lines += [
        "## Host µs per call (median over blocks)",
        "",
        "| N | " + " | ".join(methods) + " |",
        "|---" * (len(methods) + 1) + "|",
    ]
    for n, res in report["timing"].items():
        cells = [f"{res[m]['median_us']:.2f}" if m in res else "-" for m in methods]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Ratios, median over blocks of the per-block ratio (the methods of a block run side by side):",
        "",
        "| N | patched@stock / stock@stock | patched@kt / stock@kt | patched@stock / kernel fix | patched@kt / kernel fix | patched@post / kernel fix | patched@stock / previous@stock |",
        "|---|---|---|---|---|---|---|",
    ]
    fix = "stock@post (kernel fix)"
    for n, res in report["timing"].items():

        def ratio(a, b, res=res):
            if a not in res or b not in res:
                return "-"
            return f"{statistics.median(x / y for x, y in zip(res[a]['blocks_us'], res[b]['blocks_us'])):.3f}"

        cells = [
            ratio("patched@stock", "stock@stock"),
            ratio("patched@kt", "stock@kt"),
            ratio("patched@stock", fix),
            ratio("patched@kt", fix),
            ratio("patched@post", fix),
            ratio("patched@stock", "previous@stock"),
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if "first_call_ms" in report:
        lines += [
            "",
            f"First call of the patched caller over each kernel (it tries the lengths 1..512), ms: {report['first_call_ms']}",
        ]
    lines += [
        "",
        "## The post-image op alone: exact kernel vs fallback",
        "",
        "| N | kernel | host µs (op alone) | device µs (profiler median) |",
        "|---|---|---|---|",
    ]
    for n, r in report["post_op"].items():
        lines.append(f"| {n} | {r['kernel']} | {r['host_us']:.2f} | {r['device_us']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir")
    p.add_argument("--build-dir", default="build/caller_bench")
    p.add_argument("--blocks", type=int, default=21)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--sources", help="read the trees' files from here (--write-sources)")
    p.add_argument("--write-sources", help="write the files read from build/trees here and exit (no GPU)")
    p.add_argument("--previous", help="also time sglang's caller at this revision of build/trees/sglang")
    p.add_argument("--markdown", help="rewrite the Markdown of this caller_bench.json beside it and exit (no GPU)")
    args = p.parse_args(argv)
    if args.markdown:
        report = json.loads(Path(args.markdown).read_text())
        Path(args.markdown).with_suffix(".md").write_text(markdown(report))
        return 0
    global SOURCES
    if args.write_sources:
        write_sources(Path(args.write_sources), args.previous)
        return 0
    SOURCES = Path(args.sources) if args.sources else None
    import copy_ext
    import list_inputs
    import torch

    try:
        import numpy as np
    except ImportError:
        np = None
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ops, wrappers = {}, {}
    for name, (tree, rev) in KERNELS.items():
        t0 = time.time()
        ops[name] = copy_ext.build(name, git_show(tree, rev, COPY_CU), Path(args.build_dir))
        wrappers[name] = copy_ext.as_sgl_kernel(ops[name])
        print(f"built {name} ({tree}@{rev}) in {time.time() - t0:.0f} s", flush=True)
    sk = SglKernel()
    callers = {}
    sources = {}
    for tree in ("sglang", "sglang-kt"):
        for label, rev in (("stock", "upstream"), ("patched", "HEAD")):
            callers[f"{label}-{tree}"], sources[f"{label}-{tree}"] = caller(tree, rev)
    if args.previous:
        callers["previous-sglang"], sources["previous-sglang"] = caller("sglang", args.previous)
    rng = random.Random(args.seed)
    report = {"machine": machine(torch), "config": vars(args), "sources": sources, "correctness": {}, "special": {}}
    status = 0
    for tree in ("sglang", "sglang-kt"):
        for kernel in ("stock", "kt", "post"):
            for label in ("patched", "stock"):
                key = f"{label}-{tree}@{kernel}"
                report["correctness"][key] = c = check_counts(
                    torch, callers[f"{label}-{tree}"], sk, wrappers[kernel], rng
                )
                print(key, "refused", len(c["refused"]), "wrong", len(c["wrong"]), flush=True)
                if label == "patched" and (c["wrong"] or [r for r in c["refused"] if r[0] <= 512]):
                    status = 1
            if kernel != "post":
                key = f"patched-{tree}@{kernel}"
                report["special"][key] = s = special_inputs(
                    torch, list_inputs, callers[f"patched-{tree}"], callers[f"stock-{tree}"], sk, wrappers[kernel], np
                )
                print(key, "special inputs differing:", s["differ"], flush=True)
                status |= bool(s["differ"])
    report["profiled_launches"] = {
        f"{k}@N={n}": kernel_launches(torch, callers["patched-sglang"], sk, wrappers[k], n)
        for k in ("stock", "kt")
        for n in (16, 72, 100, 512)
    }
    fast = None
    try:
        import sgl_kernel_ext

        sgl_kernel_ext.ensure_loaded()
        fast = sgl_kernel_ext.list_entry_point()
        report["machine"]["sgl_kernel_ext"] = sgl_kernel_ext.__file__
    except Exception as exc:  # noqa: BLE001 (reported, the run goes on)
        print("sgl_kernel_ext not available:", exc, flush=True)
    timing = {}
    patched = callers["patched-sglang"]
    stock = callers["stock-sglang"]
    for n in TIMED_N:
        methods = {"patched@stock": (patched, wrappers["stock"]), "patched@kt": (patched, wrappers["kt"])}
        if n in LENGTHS["stock"]:
            methods["stock@stock"] = (stock, wrappers["stock"])
        if n in LENGTHS["kt"]:
            methods["stock@kt"] = (stock, wrappers["kt"])
        methods["stock@post (kernel fix)"] = (stock, wrappers["post"])
        methods["patched@post"] = (patched, wrappers["post"])
        if fast is not None:
            methods["sgl_kernel_ext list path"] = (fast, None)
        if args.previous:
            methods["previous@stock"] = (callers["previous-sglang"], wrappers["stock"])
        timing[n] = time_methods(torch, methods, sk, n, args.blocks, args.calls, rng)
        print(n, {m: round(r["median_us"], 2) for m, r in timing[n].items()}, flush=True)
    report["timing"] = timing
    # The first call of the patched caller over a kernel it has not seen: it tries the lengths.
    first_call = {}
    for kernel in ("stock", "kt", "post"):
        sk.use(copy_ext.as_sgl_kernel(ops[kernel]))
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        patched(list(range(16)))
        torch.cuda.synchronize()
        first_call[kernel] = (time.perf_counter_ns() - t0) / 1e6
    report["first_call_ms"] = first_call
    print("first call, ms:", first_call, flush=True)
    post_op = {}
    exact = (16, 32, 64, 72)
    op_n = (16, 17, 32, 33, 63, 64, 71, 72, 100, 512)
    # every N in the same blocks, the order shuffled: the first N timed alone ran slow
    op_methods = {}
    for n in op_n:
        src = torch.arange(n, dtype=torch.int32)
        dst = torch.empty(n, dtype=torch.int32, device="cuda")
        op_methods[n] = (lambda v, s=src, d=dst: ops["post"](s, d), None)
    res = time_methods(torch, op_methods, sk, 1, args.blocks, args.calls, rng)
    for n in op_n:
        post_op[n] = {
            "kernel": "exact" if n in exact else "fallback",
            "host_us": res[n]["median_us"],
            "device_us": op_device_us(torch, ops["post"], n),
        }
    report["post_op"] = post_op
    (out / "caller_bench.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "caller_bench.md").write_text(markdown(report))
    print(markdown(report))
    return status


if __name__ == "__main__":
    sys.exit(main())
