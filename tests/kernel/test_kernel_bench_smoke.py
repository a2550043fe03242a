"""CPU smoke test of benchmarks/bench_copy.py and benchmarks/launch_cost.cu.

Runs the benchmark's CPU-side code (argument parsing, statistics, the
fallback/exact ratio and target, JSON/Markdown/PNG output, merging the C++
launch-cost JSON) on synthetic samples with `--smoke`; the GPU timing code is
skipped without a GPU. The C++ microbenchmark is compiled with nvcc (no GPU
needed to compile). No stubs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
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


def test_summarize_and_ratio():
    b = _load()
    s = b.summarize([1.0, 3.0, 2.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.0, 1.0, 3.0, 3)
    assert s["spread"] == pytest.approx(1.0)
    row = lambda op, fb: {  # noqa: E731
        "op": {"host_us": b.summarize([op]), "device_us": b.summarize([op])},
        "fallback": {"host_us": b.summarize([fb]), "device_us": b.summarize([fb])},
    }
    ratios = b.ratio_table({"16": row(4.0, 4.1), "17": row(4.0, 4.0), "32": row(4.0, 4.4)})
    assert set(ratios) == {"16", "32"}  # only N with an exact kernel
    assert ratios["16"]["meets_target"] and ratios["16"]["host_us"] == pytest.approx(1.025)
    assert not ratios["32"]["meets_target"]


def test_smoke_run_writes_json_markdown_plot(tmp_path):
    launch = {
        "device": "none",
        "calls": 10,
        "repeats": 3,
        "results": [
            {"arg_bytes": 64, "host_ns": [1.0, 2.0, 3.0], "device_ns": [1, 1, 1], "sync_ns": [5, 5, 5]},
            {"arg_bytes": 2048, "host_ns": [2.0, 2.0, 3.0], "device_ns": [1, 1, 1], "sync_ns": [6, 6, 6]},
        ],
    }
    (tmp_path / "launch.json").write_text(json.dumps(launch))
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--repeats", "5", "--out-dir", str(tmp_path / "out"),
         "--launch-json", str(tmp_path / "launch.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "bench_copy.json").read_text())
    b = _load()
    assert [int(k) for k in report["results"]] == list(b.SIZES)
    for row in report["results"].values():
        assert set(row) == set(b.METHODS)
        for meth in row.values():
            assert len(meth["host_us"]["samples"]) == 5
    assert set(report["ratios"]) == {"16", "32", "64", "72"}
    md = (tmp_path / "out" / "bench_copy.md").read_text()
    assert "| 16 (exact) |" in md and "fallback / exact" in md and "| 2048 |" in md
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "out" / "bench_copy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpu_mode_refuses_bad_arguments():
    b = _load()
    with pytest.raises(SystemExit):
        b.parse_args(["--calls", "0"])
    args = b.parse_args([])
    assert args.calls >= 20000 and args.repeats >= 5 and list(args.sizes) == list(b.SIZES)


def test_launch_cost_compiles(tmp_path):
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is needed to compile benchmarks/launch_cost.cu"
    proc = subprocess.run(
        [nvcc, "-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90", "-o", str(tmp_path / "launch_cost"),
         str(REPO / "benchmarks" / "launch_cost.cu")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
