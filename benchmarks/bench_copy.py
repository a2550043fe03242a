#!/usr/bin/env python3
"""copy_to_gpu_no_ce and sglang's caller around it, with paired statistics.

For N in {16, 17, 32, 64, 72, 128, 256, 512}, one process times these methods
(sgl_kernel_ext built from the patch series' post-image copy.cu):

  op               torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce(cpu, out): the bare op
                   (exact kernel at 16/32/64/72, the fallback otherwise)
  op_again         the same op in a second slot of every block: the A/A control
  fallback         the fallback kernel forced at the same N (benchmark-only op)
  stock_op         --variant stock=COPY_CU: stock's copy.cu (the pre-image) built beside
                   it, at 32/64/72 (its only lengths); op/stock_op: the patch's cost
  old_op           --variant old=COPY_CU: an earlier post-image, for attribution
  caller_no_ce     sglang 0.5.23's copy_list_to_gpu_no_ce body: torch.tensor(list)
                   + empty_like(device="cuda") + op
  caller_pinned    the caller's copy-engine branch: torch.tensor(list, int32,
                   pin_memory=True).cuda(non_blocking=True)
  list_dispatcher  torch.ops.sgl_kernel_ext.copy_list_to_gpu_no_ce(list): the int[]
                   op through the dispatcher (output allocated in C++)
  c_type           sgl_kernel_ext.list_entry_point(), the C type the plugin installs,
                   called directly (the list read in C++, one launch)
  c_type_wrapped   the same behind sglang's HookRegistry wrapper for a REPLACE
                   function (hook_registry._wrap_fn): what a function hook would cost
  sglang_no_ce     with --sglang-root: the runner's copy_list_to_gpu_no_ce as a server
  sglang_pinned    calls them (and copy_list_to_gpu) after sglang's own load_plugins()
                   ran the installed plugin (benchmarks/sglang_path.py)

Design: B blocks per N; in each block every method runs --calls calls in an order
shuffled with a fixed seed, so all methods share each block's machine state. Host
µs per call = wall clock over the calls / calls; device µs per call = CUDA events
around the same loop / calls. Every ratio is taken per block (paired) and
summarised by its median with a 95 % bootstrap interval (--bootstrap resamples of
the blocks, fixed --seed); op_again / op is the A/A control: an interval that a
real difference must leave. Every block draws fresh random full-range int32
values, poisons the outputs and checks the last call of each method.

--values: "full" draws every value from the whole int32 range (the worst case for
reading a Python list: ints of two 30-bit digits); "counts" draws per-expert token
counts, 0..8191, what sglang's caller really passes.

--profile: device-side durations of the kernels (torch.profiler / CUPTI): the
exact kernel (through op) and the fallback kernel (forced) at 16/32/64/72, and
the fallback at the other N, --profile-calls launches each.

--smoke: no GPU; synthetic samples through the statistics and report code (CI).

Exit status: 1 only when a method produced a wrong result (or nothing ran);
noise never fails the run. Outputs: JSON (machine, versions, every sample),
Markdown, PNG.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = (16, 17, 32, 64, 72, 128, 256, 512)
EXACT = (16, 32, 64, 72)
STOCK_SIZES = (32, 64, 72)  # the lengths stock's copy.cu has kernels for
METHODS = (
    "op",
    "op_again",
    "fallback",
    "stock_op",
    "old_op",
    "caller_no_ce",
    "caller_pinned",
    "list_dispatcher",
    "c_type",
    "c_type_wrapped",
    "sglang_no_ce",
    "sglang_pinned",
)
# (numerator, denominator) ratios reported per N
RATIOS = (
    ("op_again", "op"),
    ("fallback", "op"),
    ("op", "stock_op"),
    ("old_op", "stock_op"),
    ("caller_no_ce", "op"),
    ("caller_pinned", "op"),
    ("list_dispatcher", "op"),
    ("c_type", "op"),
    ("c_type_wrapped", "op"),
    ("sglang_no_ce", "op"),
    ("sglang_pinned", "op"),
)
# the paths sglang runs with the plugin, against CALLER_TARGET
TARGETED = ("sglang_no_ce/op", "sglang_pinned/op", "c_type/op")
CALLER_TARGET = 1.3  # new caller path / bare op
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# ---------------------------------------------------------------- statistics


def summarize(samples: list[float]) -> dict:
    if not samples:
        raise ValueError("no samples")
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def bootstrap_median_ci(samples: list[float], resamples: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (resampling the samples with replacement)."""
    rng = random.Random(seed)
    k = len(samples)
    meds = sorted(statistics.median(rng.choices(samples, k=k)) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


def paired_ratios(blocks: list[dict], num: str, den: str, clock: str) -> list[float]:
    return [b[num][clock] / b[den][clock] for b in blocks if num in b and den in b]


def ratio_stats(blocks: list[dict], resamples: int, seed: int) -> dict:
    out = {}
    for num, den in RATIOS:
        entry = {}
        for clock in ("host_us", "device_us"):
            r = paired_ratios(blocks, num, den, clock)
            if not r:
                continue
            lo, hi = bootstrap_median_ci(r, resamples, seed)
            entry[clock] = {"median": statistics.median(r), "ci95": [lo, hi], "samples": r}
        if entry:
            out[f"{num}/{den}"] = entry
    return out


def verdict(fb: dict, aa: dict) -> str:
    """fallback/exact against the A/A control, host clock."""
    lo, hi = fb["ci95"]
    aa_lo, aa_hi = aa["ci95"]
    noise = max(abs(aa_lo - 1), abs(aa_hi - 1))
    if lo <= 1 <= hi:
        return f"indistinguishable: [{lo:.3f}, {hi:.3f}] contains 1 (A/A noise ±{100 * noise:.1f} %)"
    side = "slower" if lo > 1 else "faster"
    return f"fallback {side}: [{lo:.3f}, {hi:.3f}] excludes 1 (A/A [{aa_lo:.3f}, {aa_hi:.3f}])"


def analyse(results: dict, resamples: int, seed: int) -> dict:
    """Per N: per-method summaries, paired ratios with CIs, the fallback/exact verdict
    and whether the caller target is met."""
    for key, row in results.items():
        blocks = row["blocks"]
        row["summary"] = {
            m: {c: summarize([b[m][c] for b in blocks]) for c in ("host_us", "device_us")}
            for m in METHODS
            if all(m in b for b in blocks)
        }
        row["ratios"] = ratio_stats(blocks, resamples, seed)
        if int(key) in EXACT and "fallback/op" in row["ratios"]:
            row["fallback_vs_exact"] = verdict(
                row["ratios"]["fallback/op"]["host_us"], row["ratios"]["op_again/op"]["host_us"]
            )
        for name in TARGETED:
            if name in row["ratios"]:
                row["ratios"][name]["meets_target"] = row["ratios"][name]["host_us"]["median"] <= CALLER_TARGET
    return results


# ---------------------------------------------------------------- reporting


def _fmt_ratio(entry: dict) -> str:
    lo, hi = entry["ci95"]
    return f"{entry['median']:.3f} [{lo:.3f}, {hi:.3f}]"


def to_markdown(report: dict) -> str:
    m, c = report["machine"], report["config"]
    lines = [
        f"# copy_to_gpu_no_ce and its caller ({m.get('gpu', '?')})",
        "",
        f"- date: {m.get('date')}; host: {m.get('hostname')}; CPU: {m.get('cpu')} ({m.get('cpu_count')} vCPUs)",
        f"- driver {m.get('driver')}, torch {m.get('torch')}, CUDA (torch) {m.get('cuda')}, Python {m.get('python')}",
        f"- clocks at start: {m.get('clocks_start')}; at end: {m.get('clocks_end')}",
        f"- {c['blocks']} paired blocks per N, {c['calls']} calls per method per block, method order shuffled "
        f"per block (seed {c['seed']}); values uniform in {c.get('value_range')} ({c.get('values')}); ratios: median of per-block ratios, 95 % bootstrap interval "
        f"({c['bootstrap']} resamples); op_again/op is the A/A control",
        "",
        "## Host µs per call (median over blocks)",
        "",
        "| N | " + " | ".join(METHODS) + " |",
        "|---|" + "---|" * len(METHODS),
    ]
    for key, row in report["results"].items():
        cells = [
            f"{row['summary'][meth]['host_us']['median']:.2f}" if meth in row["summary"] else "-" for meth in METHODS
        ]
        lines.append(f"| {key}{' (exact)' if int(key) in EXACT else ''} | " + " | ".join(cells) + " |")
    lines += ["", "## Paired ratios, host clock: median [95 % CI]", ""]
    names = [f"{a}/{b}" for a, b in RATIOS]
    lines += ["| N | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, row in report["results"].items():
        cells = [_fmt_ratio(row["ratios"][n]["host_us"]) if n in row["ratios"] else "-" for n in names]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "## fallback / exact (host clock), against the A/A control", ""]
    for key, row in report["results"].items():
        if "fallback_vs_exact" in row:
            dev = row["ratios"]["fallback/op"].get("device_us")
            extra = f"; device events {_fmt_ratio(dev)}" if dev else ""
            lines.append(f"- N = {key}: {row['fallback_vs_exact']}{extra}")
    lines += ["", "## The patched op / stock's op (host clock), against the A/A control", ""]
    for key, row in report["results"].items():
        if "op/stock_op" in row["ratios"]:
            aa = row["ratios"]["op_again/op"]["host_us"]
            lines.append(
                f"- N = {key}: {_fmt_ratio(row['ratios']['op/stock_op']['host_us'])} "
                f"(A/A {_fmt_ratio(aa)}; old_op/stock_op "
                + (
                    _fmt_ratio(row["ratios"]["old_op/stock_op"]["host_us"])
                    if "old_op/stock_op" in row["ratios"]
                    else "-"
                )
                + ")"
            )
    lines += ["", f"## Caller paths / bare op (target ≤ {CALLER_TARGET})", ""]
    for key, row in report["results"].items():
        parts = []
        for name in TARGETED:
            if name in row["ratios"]:
                e = row["ratios"][name]
                parts.append(f"{name} {_fmt_ratio(e['host_us'])} {'met' if e['meets_target'] else 'NOT met'}")
        lines.append(f"- N = {key}: " + "; ".join(parts))
    prof = report.get("profile")
    if prof:
        lines += ["", "## Kernel duration on the device (torch.profiler/CUPTI), ns: median [p10, p90]", ""]
        lines += ["| N | kernel | launches | median | p10 | p90 |", "|---|---|---|---|---|---|"]
        for key, kernels in prof.items():
            for name, ns in kernels.items():
                q = _quantiles(ns)
                lines.append(f"| {key} | `{name}` | {len(ns)} | {q[1]:.0f} | {q[0]:.0f} | {q[2]:.0f} |")
    lines += ["", f"Correctness: {report['correct']}", ""]
    return "\n".join(lines)


def _quantiles(xs: list[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return pick(0.1), statistics.median(s), pick(0.9)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(k) for k in report["results"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for meth in METHODS:
        ys = [report["results"][str(n)]["summary"].get(meth, {}).get("host_us", {}).get("median") for n in sizes]
        if any(y is not None for y in ys):
            ax1.plot(sizes, ys, marker="o", label=meth)
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(sizes, [str(n) for n in sizes])
    ax1.set_xlabel("N (int32 values)")
    ax1.set_ylabel("host µs per call (median over blocks)")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    for name in ("op_again/op", "fallback/op", "op/stock_op", "c_type/op", "sglang_no_ce/op", "sglang_pinned/op"):
        meds, los, his = [], [], []
        for n in sizes:
            e = report["results"][str(n)]["ratios"].get(name, {}).get("host_us")
            meds.append(e["median"] if e else float("nan"))
            los.append(e["median"] - e["ci95"][0] if e else 0)
            his.append(e["ci95"][1] - e["median"] if e else 0)
        ax2.errorbar(sizes, meds, yerr=[los, his], marker="o", capsize=3, label=name)
    ax2.axhline(CALLER_TARGET, color="grey", ls="--", lw=1, label=f"caller target {CALLER_TARGET}")
    ax2.axhline(1.0, color="black", lw=0.8)
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(sizes, [str(n) for n in sizes])
    ax2.set_xlabel("N")
    ax2.set_ylabel("paired ratio to the bare op (median, 95 % CI)")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=0.3)
    fig.suptitle(
        f"copy_to_gpu_no_ce and its caller, {report['machine'].get('gpu', '?')}, {report['machine'].get('date', '')}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(report: dict, out_dir: Path, stem: str = "bench_copy") -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md"}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(to_markdown(report))
    try:
        plot(report, out_dir / f"{stem}.png")
        paths["png"] = out_dir / f"{stem}.png"
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
    return paths


# ---------------------------------------------------------------- machine


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def clocks() -> str:
    return _run(
        [
            "nvidia-smi",
            "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw",
            "--format=csv,noheader",
        ]
    )


def machine_info(torch=None) -> dict:
    cpu = ""
    try:
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    info = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "clocks_start": clocks(),
    }
    if torch is not None:
        info.update(torch=torch.__version__, cuda=torch.version.cuda)
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(gpu=props.name, sm_count=props.multi_processor_count, capability=f"{props.major}.{props.minor}")
    return info


# ---------------------------------------------------------------- GPU timing


def import_ext():
    """sgl_kernel_ext: an installed copy (prebuilt _C) first, else the source tree."""
    sys.path.append(str(Path(__file__).resolve().parents[1] / "sgl_kernel_ext" / "python"))
    import sgl_kernel_ext

    return sgl_kernel_ext


VARIANT_REGISTRATION = """#include <ATen/core/Tensor.h>
#include <torch/library.h>

void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);

TORCH_LIBRARY(sgl_kernel_ext_{name}, m) {{
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  m.impl("copy_to_gpu_no_ce", c10::kCUDA, &copy_to_gpu_no_ce);
}}
"""


def build_variant(name: str, copy_cu: Path, build_dir: Path):
    """Another copy.cu (e.g. stock's) built with the extension's flags, registered as
    torch.ops.sgl_kernel_ext_<name>.copy_to_gpu_no_ce with sgl-kernel's schema. Each
    library binds its own copy_to_gpu_no_ce (-Bsymbolic)."""
    import torch
    import torch.utils.cpp_extension as cpp_extension

    from sgl_kernel_ext._build import prepare

    work = build_dir / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "copy.cu").write_bytes(Path(copy_cu).read_bytes())
    (work / "registration.cc").write_text(VARIANT_REGISTRATION.format(name=name))
    cxx, nvcc, include_dirs = prepare()
    cpp_extension.load(
        name=f"sgl_kernel_ext_{name}",
        sources=[str(work / "copy.cu"), str(work / "registration.cc")],
        extra_cflags=cxx,
        extra_cuda_cflags=nvcc,
        extra_ldflags=["-Wl,-Bsymbolic"],
        extra_include_paths=include_dirs,
        build_directory=str(work),
        is_python_module=False,
    )
    return getattr(torch.ops, f"sgl_kernel_ext_{name}").copy_to_gpu_no_ce


def sglang_callers(ext, sglang_root: Path | None, stock_op) -> tuple[dict, dict]:
    """The runner's two callers after sglang's own load_plugins() (benchmarks/sglang_path.py),
    and the hooks its registry holds; empty without a sglang tree."""
    if sglang_root is None:
        return {}, {}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sglang_path

    runner = sglang_path.install(sglang_root, stock_op)
    hooks = sglang_path.load_plugins()
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn

    callers = {"sglang_no_ce": runner.copy_list_to_gpu_no_ce}
    if hasattr(runner, "copy_list_to_gpu"):
        callers["sglang_pinned"] = runner.copy_list_to_gpu
    installed = {
        name: {
            "type": type(fn).__name__,
            "qualname": getattr(fn, "__qualname__", ""),
            "is_c_type": isinstance(fn, type),
        }
        for name, fn in callers.items()
    }
    # the same C type behind the registry's own wrapper for a REPLACE function
    callers["c_type_wrapped"] = _wrap_fn(ext.list_entry_point().__wrapped__, ext.list_entry_point(), HookType.REPLACE)
    return callers, {"hooks": hooks, "installed": installed}


def make_calls(torch, ext, n: int, extra: dict) -> tuple[dict, dict]:
    """method -> zero-argument call for length n, and a state dict holding the
    current values and each method's last output (for the check). ``extra``: the
    variant ops (stock_op, old_op) and the sglang callers, where present."""
    i32 = torch.int32
    ops = torch.ops.sgl_kernel_ext
    op, fallback, list_op = ops.copy_to_gpu_no_ce, ops.copy_to_gpu_no_ce_fallback, ops.copy_list_to_gpu_no_ce
    c_type = ext.list_entry_point()
    st = {"values": [0] * n, "cpu": torch.zeros(n, dtype=i32), "out": {}}

    def bare(fn, name):
        out = torch.empty(n, dtype=i32, device="cuda")

        def call():
            fn(st["cpu"], out)
            st["out"][name] = out

        return call

    def returning(fn, name):
        def call():
            st["out"][name] = fn(st["values"])

        return call

    def caller_no_ce():
        t = torch.tensor(st["values"], dtype=i32, device="cpu")
        g = torch.empty_like(t, device="cuda")
        op(t, g)
        st["out"]["caller_no_ce"] = g

    def caller_pinned():
        st["out"]["caller_pinned"] = torch.tensor(st["values"], dtype=i32, pin_memory=True, device="cpu").cuda(
            non_blocking=True
        )

    calls = {
        "op": bare(op, "op"),
        "op_again": bare(op, "op_again"),
        "fallback": bare(fallback, "fallback"),
        "caller_no_ce": caller_no_ce,
        "caller_pinned": caller_pinned,
        "list_dispatcher": returning(list_op, "list_dispatcher"),
        "c_type": returning(c_type, "c_type"),
    }
    for name, fn in extra.items():
        if name == "stock_op" and n not in STOCK_SIZES:
            continue  # stock's copy.cu has kernels for these lengths only
        calls[name] = bare(fn, name) if name.endswith("_op") else returning(fn, name)
    return calls, st


def _timed(torch, call, calls: int, start, end) -> tuple[float, float]:
    """The timed loop. A method's closure is called directly: the Python-level loop
    overhead (~0.05 µs) is the same for every method."""
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        call()
    t1 = time.perf_counter_ns()
    end.record()
    end.synchronize()
    return (t1 - t0) / 1e3 / calls, start.elapsed_time(end) * 1e3 / calls


VALUE_RANGES = {"full": (INT32_MIN, INT32_MAX), "counts": (0, 8191)}


def max_n() -> int:
    """copy.cu's length bound (sgl_kernel_ext.MAX_N, read from copy.cu)."""
    return import_ext().MAX_N


def run_blocks(
    torch, ext, n: int, blocks: int, calls: int, warmup: int, rng: random.Random, values: str, extra: dict
) -> tuple[list[dict], list[str]]:
    lo, hi = VALUE_RANGES[values]
    fns, st = make_calls(torch, ext, n, extra)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    errors: list[str] = []
    out = []
    for b in range(blocks):
        st["values"] = [rng.randint(lo, hi) for _ in range(n)]
        st["cpu"].copy_(torch.tensor(st["values"], dtype=torch.int32))
        for t in st["out"].values():
            t.fill_(-1)  # poison: every method must rewrite its output
        order = [m for m in METHODS if m in fns]
        rng.shuffle(order)
        block = {"order": order}
        for meth in order:
            host, dev = _timed(torch, fns[meth], calls, start, end)
            block[meth] = {"host_us": host, "device_us": dev}
        torch.cuda.synchronize()
        for meth in order:
            got = st["out"][meth]
            if got.dtype != torch.int32 or got.device.type != "cuda" or got.cpu().tolist() != st["values"]:
                errors.append(f"N={n} block {b}: {meth} gave a wrong result")
        out.append(block)
    return out, errors


def profile_kernels(torch, n_list, launches: int) -> dict:
    """Device-side duration (ns) of every copy_to_gpu_no_ce kernel launch, from CUPTI."""
    from torch.profiler import ProfilerActivity, profile

    ops = torch.ops.sgl_kernel_ext
    res = {}
    for n in n_list:
        x = torch.randint(INT32_MIN, INT32_MAX, (n,), dtype=torch.int32)
        y = torch.empty(n, dtype=torch.int32, device="cuda")
        for fn in (ops.copy_to_gpu_no_ce, ops.copy_to_gpu_no_ce_fallback):
            fn(x, y)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(launches):
                ops.copy_to_gpu_no_ce(x, y)
                ops.copy_to_gpu_no_ce_fallback(x, y)
            torch.cuda.synchronize()
        kernels: dict[str, list[float]] = {}
        for e in prof.events():
            if "copy_to_gpu_no_ce" in e.name and e.device_type.name == "CUDA":
                kernels.setdefault(e.name, []).append(e.time_range.elapsed_us() * 1e3)
        res[str(n)] = kernels
    return res


def run_gpu(args) -> dict:
    import torch

    ext = import_ext()
    how = ext.load_jit(build_directory=args.jit) if args.jit else ext.ensure_loaded()
    print(f"sgl_kernel_ext: {how} ({ext.__file__})", flush=True)
    machine = machine_info(torch)
    extra = {}
    build_dir = Path(args.variant_build_dir)
    for spec in args.variant:
        name, _, path = spec.partition("=")
        extra[f"{name}_op"] = build_variant(name, Path(path), build_dir)
    callers, plugin = sglang_callers(ext, args.sglang_root, extra.get("stock_op", ext.copy_to_gpu_no_ce))
    extra.update(callers)
    print("sglang path:", json.dumps(plugin), flush=True)
    rng = random.Random(args.seed)
    t_end = time.time() + args.warmup_seconds
    x = torch.zeros(16, dtype=torch.int32)
    y = torch.empty(16, dtype=torch.int32, device="cuda")
    while time.time() < t_end:  # bring the clocks up before anything is timed
        for _ in range(1000):
            torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce(x, y)
        torch.cuda.synchronize()
    results, errors = {}, []
    for n in args.sizes:
        blocks, errs = run_blocks(torch, ext, n, args.blocks, args.calls, args.warmup, rng, args.values, extra)
        results[str(n)] = {"blocks": blocks}
        errors += errs
        med = {m: statistics.median(b[m]["host_us"] for b in blocks) for m in METHODS if m in blocks[0]}
        print(f"N={n}: " + " ".join(f"{m}={v:.2f}" for m, v in med.items()), flush=True)
    profile = profile_kernels(torch, args.sizes, args.profile_calls) if args.profile else None
    machine["clocks_end"] = clocks()
    machine["sglang_path"] = plugin
    return build_report(machine, args, results, errors, profile)


def build_report(machine, args, results, errors, profile) -> dict:
    keys = ("blocks", "calls", "warmup", "warmup_seconds", "seed", "bootstrap", "sizes", "values")
    config = {k: getattr(args, k) for k in keys}
    config["value_range"] = VALUE_RANGES[args.values]
    report = {
        "machine": machine,
        "config": config,
        "methods": list(METHODS),
        "results": analyse(results, args.bootstrap, args.seed),
        "profile": profile,
        "errors": errors,
        "correct": "every method's output checked in every block: all correct"
        if not errors
        else f"{len(errors)} WRONG",
    }
    return report


def run_smoke(args) -> dict:
    """Synthetic samples (no GPU) through analyse/report/plot."""
    rng = random.Random(args.seed)
    base = {
        "op": 6.0,
        "op_again": 6.0,
        "fallback": 6.1,
        "stock_op": 5.9,
        "old_op": 6.2,
        "caller_no_ce": 14.0,
        "caller_pinned": 15.0,
        "list_dispatcher": 9.0,
        "c_type": 6.5,
        "c_type_wrapped": 6.7,
        "sglang_no_ce": 6.5,
        "sglang_pinned": 6.6,
    }
    results = {}
    for n in args.sizes:
        blocks = []
        for _ in range(args.blocks):
            drift = rng.uniform(0.9, 1.1)  # shared by the block: what pairing removes
            block = {"order": [m for m in METHODS if m != "stock_op" or n in STOCK_SIZES]}
            for m in block["order"]:
                v = base[m] * drift * rng.uniform(0.98, 1.02)
                block[m] = {"host_us": v, "device_us": v}
            blocks.append(block)
        results[str(n)] = {"blocks": blocks}
    profile = {"16": {"copy_to_gpu_no_ce_kernel<16>": [1000.0, 1100.0], "copy_to_gpu_no_ce_fallback_kernel": [1050.0]}}
    return build_report(machine_info(), args, results, [], profile)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--blocks", type=int, default=30, help="paired blocks per N")
    p.add_argument("--calls", type=int, default=1000, help="calls per method per block")
    p.add_argument("--warmup", type=int, default=500, help="untimed calls per (method, N) before its blocks")
    p.add_argument("--warmup-seconds", type=float, default=3.0, help="untimed launches at the start of the run")
    p.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples per interval")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--values", choices=sorted(VALUE_RANGES), default="full", help="value distribution (see above)")
    p.add_argument("--profile", action="store_true", help="device-side kernel durations (torch.profiler)")
    p.add_argument("--profile-calls", type=int, default=200)
    p.add_argument("--jit", metavar="BUILD_DIR", help="build the extension on the fly into BUILD_DIR")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=COPY_CU",
        help="also time another copy.cu's op as NAME_op (stock: the pre-image, timed at 32/64/72; old: an earlier post-image)",
    )
    p.add_argument("--variant-build-dir", default="/tmp/sgl_kernel_ext_variants")
    p.add_argument(
        "--sglang-root",
        type=Path,
        help="a sglang tree's python/ (build/trees/sglang/python): time the callers after its own load_plugins()",
    )
    p.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--stem", default="bench_copy")
    p.add_argument("--smoke", action="store_true", help="no GPU: synthetic samples through the report code")
    args = p.parse_args(argv)
    for name in ("blocks", "calls", "bootstrap"):
        if getattr(args, name) < (2 if name == "blocks" else 1):
            p.error(f"--{name} is too small")
    if any(not 1 <= n <= max_n() for n in args.sizes):
        p.error(f"--sizes must be in 1..{max_n()}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run_smoke(args) if args.smoke else run_gpu(args)
    paths = write_outputs(report, Path(args.out_dir), args.stem)
    print(to_markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    for e in report["errors"][:20]:
        print("WRONG:", e, file=sys.stderr)
    return 1 if report["errors"] or not report["results"] else 0


if __name__ == "__main__":
    sys.exit(main())
