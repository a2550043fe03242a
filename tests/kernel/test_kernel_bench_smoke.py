"""CPU smoke test of benchmarks/bench_copy.py.

Runs the benchmark's CPU-side code (argument parsing, paired ratios, bootstrap
intervals, the fallback/exact verdict against the A/A control, the caller target,
JSON/Markdown/PNG output) on synthetic samples with `--smoke`; the GPU timing code
runs on the device machine only. No stubs.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_copy.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_copy", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bootstrap_interval_is_seeded_and_covers_the_median():
    b = _load()
    xs = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 1.0, 0.98, 1.02]
    lo, hi = b.bootstrap_median_ci(xs, 2000, seed=7)
    assert (lo, hi) == b.bootstrap_median_ci(xs, 2000, seed=7)
    assert lo <= statistics.median(xs) <= hi and lo >= min(xs) and hi <= max(xs)


def _blocks(op, fb, aa, k=12):
    mk = lambda v: {"host_us": v, "device_us": v}  # noqa: E731
    return [
        {"op": mk(op), "op_again": mk(aa * (1 + 0.001 * (i % 3 - 1))), "fallback": mk(fb * (1 + 0.001 * (i % 5 - 2)))}
        for i in range(k)
    ]


def test_verdict_separates_a_difference_from_noise():
    b = _load()
    same = b.ratio_stats(_blocks(6.0, 6.0, 6.0), 1000, 1)
    assert b.verdict(same["fallback/op"]["host_us"], same["op_again/op"]["host_us"]).startswith("indistinguishable")
    slower = b.ratio_stats(_blocks(6.0, 6.6, 6.0), 1000, 1)
    assert slower["fallback/op"]["host_us"]["median"] == pytest.approx(1.1, abs=0.01)
    assert b.verdict(slower["fallback/op"]["host_us"], slower["op_again/op"]["host_us"]).startswith("fallback slower")


def test_smoke_run_writes_json_markdown_plot(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--blocks", "6", "--bootstrap", "500", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "bench_copy.json").read_text())
    b = _load()
    assert [int(k) for k in report["results"]] == list(b.SIZES)
    for key, row in report["results"].items():
        expected = set(b.METHODS) - (set() if int(key) in b.STOCK_SIZES else {"stock_op"})
        assert len(row["blocks"]) == 6 and set(row["summary"]) == expected
        assert ("op/stock_op" in row["ratios"]) == (int(key) in b.STOCK_SIZES)
        assert len(row["ratios"]["fallback/op"]["host_us"]["samples"]) == 6
        assert ("fallback_vs_exact" in row) == (int(key) in b.EXACT)
    md = (tmp_path / "bench_copy.md").read_text()
    assert "| 16 (exact) |" in md and "A/A" in md and "target ≤ 1.3" in md
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "bench_copy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpu_mode_refuses_bad_arguments():
    b = _load()
    for bad in (["--blocks", "1"], ["--calls", "0"], ["--sizes", "513"]):
        with pytest.raises(SystemExit):
            b.parse_args(bad)
    args = b.parse_args([])
    assert args.blocks >= 20 and list(args.sizes) == list(b.SIZES)


def test_launch_cost_compiles(tmp_path):
    import shutil

    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is needed to compile benchmarks/launch_cost.cu"
    proc = subprocess.run(
        [
            nvcc,
            "-O3",
            "-std=c++17",
            "-gencode=arch=compute_90,code=sm_90",
            "-o",
            str(tmp_path / "launch_cost"),
            str(REPO / "benchmarks" / "launch_cost.cu"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr


def test_caller_cost_from_a_smoke_report(tmp_path):
    bench = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--smoke",
            "--blocks",
            "4",
            "--bootstrap",
            "100",
            "--values",
            "counts",
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bench.returncode == 0, bench.stderr
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "caller_cost.py"),
            "--bench",
            str(tmp_path / "bench_copy.json"),
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "caller_cost.json").read_text())
    glm = [r for r in report["rows"] if r["model"].startswith("GLM-5.2")]
    assert [r["local_experts"] for r in glm] == [16, 16] and all(r["moe_layers"] == 75 for r in glm)
    smoke = json.loads((tmp_path / "bench_copy.json").read_text())["results"]["16"]["blocks"]
    expected = statistics.median(b["caller_no_ce"]["host_us"] * 75 for b in smoke)
    assert glm[0]["before_us_per_step"] == pytest.approx(expected)
    assert "not end to end" in report["what"]
