#!/usr/bin/env python3
"""What the no-copy-engine transfer (copy_to_gpu_no_ce) costs, in one run (issue 7).

For N in {16, 17, 32, 64, 72, 128, 256, 512} it times, in one process:

  op               torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce: the patched op as
                   dispatched (exact kernel for 16/32/64/72, fallback otherwise)
  fallback         torch.ops.sgl_kernel_ext.copy_to_gpu_no_ce_fallback: the one
                   fallback kernel forced at the same N (benchmark-only op)
  caller_no_ce     sglang 0.5.23's copy_list_to_gpu_no_ce body with the patched op:
                   torch.tensor(list) + empty_like(device="cuda") + op
  caller_pinned    the caller's real alternative path:
                   torch.tensor(list, dtype=int32, pin_memory=True).cuda(non_blocking=True)
  prepinned_copy   out.copy_(pinned_cpu_buffer, non_blocking=True)
  pageable_copy    out.copy_(pageable_cpu_buffer)

Host time per call: wall clock over a loop of --calls calls / calls. Device time per
call: CUDA events around the same loop / calls. --repeats repeats (median and
spread), after --warmup calls that are not timed. Each repeat uses fresh random
full-range int32 values, poisons the output first and checks it afterwards.

--load: the same transfers while another stream keeps host-to-device copies of
large pinned buffers going (as the offloader's weight prefetch does); there each
call is followed by a stream synchronize and the per-call latency is reported.

--launch-json: merge the C++ launch-cost microbenchmark (benchmarks/launch_cost.cu).

--smoke: no GPU; runs the statistics/report/plot code on synthetic samples (CI).

Outputs: JSON (machine, driver, torch, CUDA, clocks, every sample), a Markdown
table, a PNG plot.
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
METHODS = ("op", "fallback", "caller_no_ce", "caller_pinned", "prepinned_copy", "pageable_copy")
LOAD_SIZES = (16, 72, 512)
TARGET_RATIO = 1.05
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# ---------------------------------------------------------------- statistics


def summarize(samples: list[float]) -> dict:
    """Median, min, max and relative spread ((max - min) / median) of samples."""
    if not samples:
        raise ValueError("no samples")
    med = statistics.median(samples)
    lo, hi = min(samples), max(samples)
    return {
        "median": med,
        "min": lo,
        "max": hi,
        "spread": (hi - lo) / med if med else float("nan"),
        "n": len(samples),
    }


def ratio_table(results: dict) -> dict:
    """fallback / op (host and device medians) at each N with an exact kernel."""
    out = {}
    for n in EXACT:
        key = str(n)
        if key not in results:
            continue
        row = results[key]
        entry = {}
        for clock in ("host_us", "device_us"):
            op = row["op"][clock]["median"]
            fb = row["fallback"][clock]["median"]
            entry[clock] = fb / op if op else float("nan")
        entry["meets_target"] = entry["host_us"] <= TARGET_RATIO and entry["device_us"] <= TARGET_RATIO
        out[key] = entry
    return out


# ---------------------------------------------------------------- reporting


def to_markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# copy_to_gpu_no_ce benchmark ({m.get('gpu', '?')})",
        "",
        f"- date: {m.get('date')}; host: {m.get('hostname')}; CPU: {m.get('cpu')}",
        f"- driver {m.get('driver')}, torch {m.get('torch')}, CUDA (torch) {m.get('cuda')}",
        f"- clocks at start: {m.get('clocks_start')}; at end: {m.get('clocks_end')}",
        f"- {report['config']['repeats']} repeats x {report['config']['calls']} calls per "
        f"(method, N), after {report['config']['warmup']} warm-up calls each and "
        f"{report['config'].get('warmup_seconds', 0)} s of warm-up launches; repeats interleaved "
        "across methods; median [min-max]",
        "",
        "## Time per call, µs (host wall clock / device events)",
        "",
        "| N | " + " | ".join(METHODS) + " |",
        "|---|" + "---|" * len(METHODS),
    ]
    for key, row in report["results"].items():
        cells = []
        for meth in METHODS:
            if meth not in row:
                cells.append("-")
                continue
            h, d = row[meth]["host_us"], row[meth]["device_us"]
            cells.append(f"{h['median']:.2f} [{h['min']:.2f}-{h['max']:.2f}] / {d['median']:.2f}")
        kind = " (exact)" if int(key) in EXACT else ""
        lines.append(f"| {key}{kind} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## fallback / exact (target ≤ {TARGET_RATIO})",
        "",
        "| N | host | device | target met |",
        "|---|---|---|---|",
    ]
    for key, r in report["ratios"].items():
        lines.append(
            f"| {key} | {r['host_us']:.3f} | {r['device_us']:.3f} | {'yes' if r['meets_target'] else 'NO'} |"
        )
    if report.get("load"):
        ld = report["load"]
        lines += [
            "",
            "## Call + synchronize latency, µs: idle vs. background H2D stream",
            "",
            f"Background: {ld['background'].get('gib_per_s', float('nan')):.1f} GiB/s of pinned "
            f"host-to-device copies on another stream (busy throughout: {ld['background'].get('busy_throughout')}).",
            "",
            "| N | method | idle median | idle p90 | loaded median | loaded p90 |",
            "|---|---|---|---|---|---|",
        ]
        for key, row in ld["results"].items():
            for meth, r in row.items():
                lines.append(
                    f"| {key} | {meth} | {r['idle']['median']:.1f} | {r['idle']['p90']:.1f} | "
                    f"{r['loaded']['median']:.1f} | {r['loaded']['p90']:.1f} |"
                )
    if report.get("launch_cost"):
        lc = report["launch_cost"]
        lines += [
            "",
            f"## C++ launch loop: by-value argument size ({lc.get('calls')} calls x {lc.get('repeats')} repeats)",
            "",
            "| argument bytes | host ns/launch | device ns/launch | launch+sync ns |",
            "|---|---|---|---|",
        ]
        for r in lc["results"]:
            lines.append(
                f"| {r['arg_bytes']} | {statistics.median(r['host_ns']):.0f} | "
                f"{statistics.median(r['device_ns']):.0f} | {statistics.median(r['sync_ns']):.0f} |"
            )
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if report.get("launch_cost") else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    sizes = [int(k) for k in report["results"]]
    for meth in METHODS:
        ys = [report["results"][str(n)][meth]["host_us"]["median"] for n in sizes]
        lo = [report["results"][str(n)][meth]["host_us"]["min"] for n in sizes]
        hi = [report["results"][str(n)][meth]["host_us"]["max"] for n in sizes]
        ax.errorbar(
            sizes,
            ys,
            yerr=[[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]],
            marker="o",
            capsize=3,
            label=meth,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("N (int32 elements)")
    ax.set_ylabel("host µs per call (median, min-max)")
    ax.set_title(f"time per call vs N — {report['machine'].get('gpu', '?')}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if panels == 2:
        ax = axes[0][1]
        lc = report["launch_cost"]["results"]
        xs = [r["arg_bytes"] for r in lc]
        for key, label in (("host_ns", "host"), ("device_ns", "device events"), ("sync_ns", "launch+sync")):
            ax.plot(xs, [statistics.median(r[key]) / 1000 for r in lc], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("by-value argument bytes")
        ax.set_ylabel("µs per launch (median)")
        ax.set_title("C++ launch loop: cost vs argument size")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(report: dict, out_dir: Path, stem: str = "bench_copy") -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / f"{stem}.json",
        "md": out_dir / f"{stem}.md",
        "png": out_dir / f"{stem}.png",
    }
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(to_markdown(report))
    try:
        plot(report, paths["png"])
    except ImportError as exc:  # matplotlib missing: JSON + Markdown still written
        print(f"no plot: {exc}", file=sys.stderr)
        paths.pop("png")
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
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "clocks_start": clocks(),
    }
    if torch is not None:
        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = props.name
            info["sm_count"] = props.multi_processor_count
            info["capability"] = f"{props.major}.{props.minor}"
    return info


# ---------------------------------------------------------------- GPU timing


def _fresh_values(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(INT32_MIN, INT32_MAX) for _ in range(n)]


class Case:
    """One (method, N): fill() stores fresh values, call() does one transfer,
    result() is the tensor the last call wrote."""

    def __init__(self, torch, method: str, n: int):
        self.torch, self.method, self.n = torch, method, n
        i32 = torch.int32
        self.values: list[int] = [0] * n
        self.cpu = torch.zeros(n, dtype=i32)
        self.pinned = torch.zeros(n, dtype=i32).pin_memory()
        self.out = torch.empty(n, dtype=i32, device="cuda")
        self.last = self.out
        ops = torch.ops.sgl_kernel_ext
        op, fb, out, cpu, pinned = ops.copy_to_gpu_no_ce, ops.copy_to_gpu_no_ce_fallback, self.out, self.cpu, self.pinned
        if method == "op":
            self.call = lambda: op(cpu, out)
        elif method == "fallback":
            self.call = lambda: fb(cpu, out)
        elif method == "caller_no_ce":

            def call():
                tensor_cpu = torch.tensor(self.values, dtype=i32, device="cpu")
                tensor_gpu = torch.empty_like(tensor_cpu, device="cuda")
                op(tensor_cpu, tensor_gpu)
                self.last = tensor_gpu

            self.call = call
        elif method == "caller_pinned":

            def call():
                self.last = torch.tensor(self.values, dtype=i32, pin_memory=True, device="cpu").cuda(
                    non_blocking=True
                )

            self.call = call
        elif method == "prepinned_copy":
            self.call = lambda: out.copy_(pinned, non_blocking=True)
        elif method == "pageable_copy":
            self.call = lambda: out.copy_(cpu)
        else:
            raise ValueError(method)

    def fill(self, values: list[int]) -> None:
        self.values = values
        t = self.torch.tensor(values, dtype=self.torch.int32)
        self.cpu.copy_(t)
        self.pinned.copy_(t)
        self.out.fill_(-1)
        self.last = self.out

    def check(self) -> None:
        got = self.last.cpu().tolist()
        if got != self.values:
            bad = next(i for i, (a, b) in enumerate(zip(got, self.values)) if a != b)
            raise AssertionError(f"{self.method} N={self.n}: wrong value at {bad}: {got[bad]} != {self.values[bad]}")


def _timed_repeat(torch, case: Case, calls: int, rng, start, end) -> tuple[float, float]:
    """One repeat: fresh values, poisoned output, `calls` calls, checked result.
    Returns (host µs per call, device µs per call)."""
    stream = torch.cuda.current_stream()
    case.fill(_fresh_values(rng, case.n))
    torch.cuda.synchronize()
    call = case.call
    start.record(stream)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        call()
    t1 = time.perf_counter_ns()
    end.record(stream)
    end.synchronize()
    case.check()
    return (t1 - t0) / calls / 1000.0, start.elapsed_time(end) * 1000.0 / calls


def time_throughput_all(torch, n: int, calls: int, repeats: int, warmup: int, rng) -> dict:
    """All methods at one N. Repeats are interleaved across methods (rotating
    the order each round), so clock or load drift during the run hits every
    method alike instead of whichever was measured first."""
    cases = {meth: Case(torch, meth, n) for meth in METHODS}
    for case in cases.values():
        case.fill(_fresh_values(rng, n))
        for _ in range(warmup):
            case.call()
        torch.cuda.synchronize()
        case.check()
    samples = {meth: ([], []) for meth in METHODS}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for rep in range(repeats):
        for j in range(len(METHODS)):
            meth = METHODS[(j + rep) % len(METHODS)]
            host, device = _timed_repeat(torch, cases[meth], calls, rng, start, end)
            samples[meth][0].append(host)
            samples[meth][1].append(device)
    return {
        meth: {
            "host_us": summarize(h) | {"samples": h},
            "device_us": summarize(d) | {"samples": d},
        }
        for meth, (h, d) in samples.items()
    }


def global_warmup(torch, seconds: float) -> None:
    """Untimed launches until `seconds` passed: GPU and CPU clocks ramp up."""
    case = Case(torch, "op", 16)
    case.fill(list(range(16)))
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(1000):
            case.call()
        torch.cuda.synchronize()


def _p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))]


def time_latency(torch, case: Case, iters: int, rng) -> dict:
    stream = torch.cuda.current_stream()
    case.fill(_fresh_values(rng, case.n))
    for _ in range(20):
        case.call()
        stream.synchronize()
    lat = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        case.call()
        stream.synchronize()
        lat.append((time.perf_counter_ns() - t0) / 1000.0)
    case.check()
    return {"median": statistics.median(lat), "p90": _p90(lat), "samples": lat}


class Background:
    """Keeps pinned host-to-device copies queued on a side stream."""

    def __init__(self, torch, chunk_mib: int = 512):
        self.torch = torch
        self.stream = torch.cuda.Stream()
        self.src = torch.empty(chunk_mib << 20, dtype=torch.uint8).pin_memory()
        self.dst = [torch.empty(chunk_mib << 20, dtype=torch.uint8, device="cuda") for _ in range(2)]
        self.busy_throughout = True

    def top_up(self, seconds_ahead: float, gib_per_s: float) -> None:
        need = int(seconds_ahead * gib_per_s * (1 << 30) / self.src.numel()) + 1
        with self.torch.cuda.stream(self.stream):
            for i in range(need):
                self.dst[i % 2].copy_(self.src, non_blocking=True)

    def still_busy(self) -> bool:
        busy = not self.stream.query()
        self.busy_throughout &= busy
        return busy

    def measure_rate(self) -> float:
        ev0, ev1 = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        with self.torch.cuda.stream(self.stream):
            ev0.record()
            for i in range(8):
                self.dst[i % 2].copy_(self.src, non_blocking=True)
            ev1.record()
        ev1.synchronize()
        return 8 * self.src.numel() / (ev0.elapsed_time(ev1) / 1000.0) / (1 << 30)


def import_ext():
    """sgl_kernel_ext: an installed copy (prebuilt _C) first, else the source tree
    (appended to the path; a regular package also wins over the repo's namespace dir)."""
    sys.path.append(str(Path(__file__).resolve().parents[1] / "sgl_kernel_ext" / "python"))
    import sgl_kernel_ext

    return sgl_kernel_ext


def run_gpu(args) -> dict:
    import torch

    sgl_kernel_ext = import_ext()

    if args.jit:
        sgl_kernel_ext.load_jit(build_directory=args.jit)
    loaded = sgl_kernel_ext.ensure_loaded()
    rng = random.Random(args.seed)
    report = {
        "machine": machine_info(torch),
        "config": {
            "sizes": list(args.sizes),
            "methods": list(METHODS),
            "calls": args.calls,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "warmup_seconds": args.warmup_seconds,
            "interleaved": True,
            "seed": args.seed,
            "extension": loaded,
            "extension_file": getattr(sys.modules.get("sgl_kernel_ext._C"), "__file__", None),
        },
        "results": {},
    }
    global_warmup(torch, args.warmup_seconds)
    for n in args.sizes:
        row = time_throughput_all(torch, n, args.calls, args.repeats, args.warmup, rng)
        for meth in METHODS:
            h, d = row[meth]["host_us"], row[meth]["device_us"]
            print(
                f"N={n:4d} {meth:15s} host {h['median']:7.2f} µs [{h['min']:.2f}-{h['max']:.2f}]"
                f"  device {d['median']:7.2f} µs",
                flush=True,
            )
        report["results"][str(n)] = row
    report["ratios"] = ratio_table(report["results"])
    if args.load:
        bg = Background(torch)
        rate = bg.measure_rate()
        load = {"background": {"gib_per_s": rate, "chunk_bytes": bg.src.numel()}, "results": {}}
        for n in LOAD_SIZES:
            row = {}
            for meth in METHODS:
                idle = time_latency(torch, Case(torch, meth, n), args.load_iters, rng)
                bg.top_up(1.0, rate)
                loaded_lat = time_latency(torch, Case(torch, meth, n), args.load_iters, rng)
                bg.still_busy()
                row[meth] = {"idle": idle, "loaded": loaded_lat}
                print(
                    f"load N={n:4d} {meth:15s} idle {idle['median']:7.1f} µs  loaded {loaded_lat['median']:8.1f} µs",
                    flush=True,
                )
            load["results"][str(n)] = row
            bg.stream.synchronize()
        load["background"]["busy_throughout"] = bg.busy_throughout
        report["load"] = load
    report["machine"]["clocks_end"] = clocks()
    return report


# ---------------------------------------------------------------- smoke (CPU)


def run_smoke(args) -> dict:
    """Synthetic samples through the same aggregation/report code: no GPU."""
    rng = random.Random(args.seed)
    report = {
        "machine": machine_info(None) | {"gpu": "none (smoke)"},
        "config": {"sizes": list(args.sizes), "methods": list(METHODS), "calls": args.calls,
                   "repeats": args.repeats, "warmup": args.warmup, "seed": args.seed, "extension": "none"},
        "results": {},
    }
    for n in args.sizes:
        row = {}
        for j, meth in enumerate(METHODS):
            host = [5.0 + j + rng.random() * 0.1 for _ in range(args.repeats)]
            dev = [h * 0.9 for h in host]
            row[meth] = {
                "host_us": summarize(host) | {"samples": host},
                "device_us": summarize(dev) | {"samples": dev},
            }
        report["results"][str(n)] = row
    report["ratios"] = ratio_table(report["results"])
    report["machine"]["clocks_end"] = ""
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2000, help="untimed calls per (method, N) before timing")
    p.add_argument("--warmup-seconds", type=float, default=3.0, help="untimed launches at the start of the run")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--load", action="store_true", help="also time call+sync under a background H2D stream")
    p.add_argument("--load-iters", type=int, default=300)
    p.add_argument("--launch-json", help="launch_cost JSON to merge into the report")
    p.add_argument("--jit", metavar="BUILD_DIR", help="build the extension on the fly into BUILD_DIR")
    p.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--stem", default="bench_copy")
    p.add_argument("--smoke", action="store_true", help="no GPU: synthetic samples through the report code")
    args = p.parse_args(argv)
    if not args.smoke and (args.calls < 1 or args.repeats < 1):
        p.error("--calls and --repeats must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run_smoke(args) if args.smoke else run_gpu(args)
    if args.launch_json:
        report["launch_cost"] = json.loads(Path(args.launch_json).read_text())
    paths = write_outputs(report, Path(args.out_dir), args.stem)
    print(to_markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    if not args.smoke and not all(r["meets_target"] for r in report["ratios"].values()):
        print(f"fallback/exact above {TARGET_RATIO} at some N", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
