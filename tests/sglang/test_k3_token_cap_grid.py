"""Kimi K3 / MegaMoE token cap over a configuration grid (patches/sglang/0001-0004, 0006-0009).

Each row of the grid (tests/sglang/k3_grid/grid.py, fixed seed) is resolved by sglang
0.5.23's real ServerArgs pipeline in a probe process (k3_grid/probe.py) for two
trees: stock and the patched tree. The startup decision is judged against the oracle
(k3_grid/oracle.py), which derives the rows one rank's MoE receives from sglang's own
runtime code, never from the patch's formula.

`make test` runs the whole grid (FULL_CONFIGS configurations, three caps each: 3,162
judged rows; the two probes take about 100 s on this project's 2-core machine, up to 4
minutes while other jobs share the cores) and must reproduce the committed docs/k3-token-cap-grid.json exactly.
`make k3-grid` runs it with SGL_OVERLAY_K3_GRID_WRITE=1 and writes
docs/k3-token-cap-grid.{md,json}. SGL_OVERLAY_K3_GRID_CONFIGS=400 runs a fixed-seed
sample (a prefix of the same sequence) for a quicker local check.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import REPO_ROOT, run_probe

GRID_DIR = Path(__file__).resolve().parent / "k3_grid"
sys.path.insert(0, str(GRID_DIR))

import grid  # noqa: E402
import report  # noqa: E402

PROBE = GRID_DIR / "probe.py"
RUNTIME = Path(__file__).resolve().parent / "k3_cap_probes" / "runtime.py"
FULL_CONFIGS = 1100
NUM_CONFIGS = int(os.environ.get("SGL_OVERLAY_K3_GRID_CONFIGS", FULL_CONFIGS))
DOC_JSON = REPO_ROOT / "docs" / "k3-token-cap-grid.json"
DOC_MD = REPO_ROOT / "docs" / "k3-token-cap-grid.md"


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    data = grid.build(NUM_CONFIGS)
    path = tmp_path_factory.mktemp("k3grid") / "spec.json"
    path.write_text(json.dumps(data))
    return data, path


@pytest.fixture(scope="module")
def graded(spec, stock_root, patched_root, tmp_path_factory):
    data, path = spec
    roots = {"stock": stock_root("sglang"), "new": patched_root("sglang")}
    out_dir = tmp_path_factory.mktemp("k3grid-out")
    start = time.monotonic()

    def probe(series):
        out = out_dir / f"{series}.json"
        run_probe(roots[series], PROBE, str(path), str(out))
        return series, json.loads(out.read_text())

    # Two probe processes at a time: CI has two cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(probe, roots))
    seconds = time.monotonic() - start
    doc = report.judge(data, results)
    by_id = {s: {r["id"]: r for r in results[s]["rows"]} for s in results}
    if os.environ.get("SGL_OVERLAY_K3_GRID_WRITE"):
        DOC_JSON.write_text(report.dump(doc))
        DOC_MD.write_text(report.markdown(doc, seconds))
    return doc, by_id, seconds


def test_grid_size(graded):
    doc, _, _ = graded
    assert doc["configs"] >= 1000
    assert doc["invalid"] < doc["configs"] // 10, doc["invalid_reasons"]


def test_same_caps_and_oracle_in_every_tree(graded, spec):
    """The caps come from the oracle on the unchecked configuration: the same code
    in every tree, so every series is judged on the same rows."""
    _, by_id, _ = graded
    for row in spec[0]["rows"]:
        seen = {json.dumps([by_id[s][row["id"]].get("cap"), by_id[s][row["id"]].get("reference")]) for s in by_id}
        assert len(seen) == 1, row


def test_new_series_has_no_false_accepts(graded):
    doc, _, _ = graded
    assert doc["series"]["new"]["false_accepts"] == 0, doc["false_accept_rows"]["new"][:5]


def test_stock_accepts_overflowing_configs(graded):
    """The bug: stock starts servers whose MoE later overflows the cap, in each
    reported failure class, and refuses fitting non-K3 ones under DP attention."""
    doc, _, _ = graded
    assert doc["series"]["stock"]["false_accepts"] > 0
    classes = doc["classes"]
    for tag in report.REPORTED_CLASSES:
        if tag.startswith("k3-"):
            assert classes[tag]["stock"]["false_accepts"] > 0, tag
        assert classes[tag]["new"]["false_accepts"] == 0, tag
    assert classes["other-dp-attn-tp"]["stock"]["false_refusals"] > 0
    # The only refusals left there: an opt-in warmup whose rows follow the device.
    warmup = [
        r
        for r in doc["false_refusals"]["new"]
        if r["model"] not in grid.K3_MODELS
        and r["args"].get("enable_dp_attention")
        and r["cause"].startswith("SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP")
    ]
    assert classes["other-dp-attn-tp"]["new"]["false_refusals"] <= len(warmup)


def test_new_axes_are_in_the_grid(graded):
    """Each shape the check learned (chunk-disabled prefill included), and each grid
    axis (EAGLE3, NGRAM, STANDALONE drafts, explicit decode graph sizes, context length,
    page size, TP 32, PP 4), is a class of the grid with rows of its own, as are draft
    top-k rows from dense and MoE drafts, and this series' false refusals are only the
    warmup it refuses outright."""
    doc, _, _ = graded
    for tag in report.NEW_AXES + report.GRID_AXES:
        assert doc["classes"][tag]["new"]["configs"] >= 40, tag
    for tag in report.DRAFT_AXES:
        assert doc["classes"][tag]["new"]["configs"] >= 5, tag
    assert set(doc["series"]["new"]["false_refusal_causes"]) <= {report.PP_WARMUP_CAUSE}


def test_every_false_refusal_has_a_known_cause(graded):
    doc, _, _ = graded
    refusals = doc["false_refusals"]["new"]
    assert len(refusals) == doc["series"]["new"]["false_refusals"]
    for refusal in refusals:
        assert not refusal["cause"].startswith("other"), refusal


def test_non_k3_changes_only_where_stock_was_wrong(graded):
    """A non-K3 decision differs from stock only where stock was wrong, or where
    stock refused an unset request pool that this series clamps to fit (the
    clamped server is judged like every other: no false accepts), or where this
    series refuses the PP DeepGEMM warmup it cannot bound."""
    doc, _, _ = graded
    allowed = ("refused -> clamped", "(SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP refused)")
    for change in doc["non_k3_changes"]:
        assert not change.startswith("stock ok") or change.endswith(allowed), doc["non_k3_changes"]


def test_clamped_rows_log_one_line_and_fit(graded):
    _, by_id, _ = graded
    clamped = [r for r in by_id["new"].values() if r.get("accepted") and r["log"]]
    assert clamped
    for result in clamped:
        assert len(result["log"]) == 1, result["log"]
        line = result["log"][0]
        assert f"max_running_requests set to {result['max_running_requests']} (" in line
        assert result["required"] <= result["cap"]
        assert result["oracle"]["pool"] < result["reference"]["pool"]


def test_committed_summary_matches(graded):
    doc, _, _ = graded
    assert DOC_JSON.is_file(), "run `make k3-grid` to write docs/k3-token-cap-grid.json"
    committed = json.loads(DOC_JSON.read_text())
    assert committed["seed"] == doc["seed"]
    assert committed["series"]["new"]["false_accepts"] == 0
    if committed["distinct_configurations"] + committed["invalid"] // 3 < NUM_CONFIGS:
        pytest.fail("docs/k3-token-cap-grid.json covers less than this run: `make k3-grid`")
    if NUM_CONFIGS == FULL_CONFIGS:
        assert committed == json.loads(report.dump(doc)), "docs/k3-token-cap-grid.json is stale: run `make k3-grid`"


def _k3_rows(by_id, series, spec, want_false_accept):
    rows = []
    models = {r["id"]: r["model"] for r in spec[0]["rows"]}
    for result in by_id[series].values():
        if "invalid" in result or not result["accepted"]:
            continue
        if models[result["id"]] not in grid.K3_MODELS:
            continue
        if (result["required"] > result["cap"]) is want_false_accept:
            rows.append(result)
    return rows


def test_runtime_agrees_with_the_grid(graded, spec, patched_root):
    """The patched K3 MoE forward, fed each accepted row's oracle bound: the rows a
    server stock started can receive run in passes of at most the cap's rows; those
    a server this series started can receive reach the kernel in one pass."""
    _, by_id, _ = graded
    overflowing = sorted(_k3_rows(by_id, "stock", spec, True), key=lambda r: r["required"])[:4]
    fitting = sorted(_k3_rows(by_id, "new", spec, False), key=lambda r: -r["required"])[:4]
    assert overflowing and fitting
    pairs = [f"{r['required']}:{r['cap']}" for r in overflowing + fitting]
    result = run_probe(patched_root("sglang"), RUNTIME, *pairs)
    for row in overflowing:
        out = result[f"{row['required']}:{row['cap']}"]
        assert out["error_type"] is None, out
        assert len(out["kernel_rows"]) == -(-row["required"] // row["cap"]) > 1, out
        assert max(out["kernel_rows"]) <= row["cap"]
        assert out["out_rows"] == row["required"]
    for row in fitting:
        out = result[f"{row['required']}:{row['cap']}"]
        assert out["error_type"] is None, out
        assert out["kernel_rows"] == [row["required"]]


_FIT = {
    "max_running_requests": re.compile(r"--max-running-requests to (\d+) \("),
    "chunked_prefill_size": re.compile(r"--chunked-prefill-size from \S+ (?:\S+ )?to (\d+)"),
}


def test_refusals_name_a_value_that_fits(graded, spec, patched_root, tmp_path):
    """A refusal that names a --max-running-requests or --chunked-prefill-size: with
    that value the phase it bounds fits by the oracle (and starts, unless the other
    phase overflows); one more request or token per DP rank overflows by the
    oracle (the named value is the largest that fits). K3 rows only: for the other
    models the bound can ask for less than the oracle allows (Qwen3-MoE on TP4 with NGRAM:
    a 261-token chunk forms 64 rows by the oracle, over 65 by the bound), so their named value
    is not always the largest."""
    _, by_id, _ = graded
    rows = {r["id"]: r for r in spec[0]["rows"]}
    cases = []
    for arg, pattern in _FIT.items():
        named = []
        for result in sorted(by_id["new"].values(), key=lambda r: r["id"]):
            if rows[result["id"]]["model"] not in grid.K3_MODELS:
                continue
            match = "invalid" not in result and not result["accepted"] and pattern.search(result["error"])
            if match:
                named.append((result, int(match.group(1))))
        assert named, arg
        for result, value in named[:: max(len(named) // 6, 1)][:6]:
            row = rows[result["id"]]
            dp = row["args"].get("dp_size", 1) if row["args"].get("enable_dp_attention") else 1
            for delta, fits in ((0, True), (dp, False)):
                args = {**row["args"], arg: value + delta}
                cap = {"base": "fixed", "value": result["cap"]}
                cases.append(
                    (
                        arg,
                        fits,
                        {"id": len(cases), "config": len(cases), "model": row["model"], "args": args, "cap": cap},
                    )
                )
    path = tmp_path / "fits.json"
    path.write_text(json.dumps({"models": grid.MODELS, "rows": [c for _, _, c in cases]}))
    out = tmp_path / "fits-out.json"
    run_probe(patched_root("sglang"), PROBE, str(path), str(out))
    for (arg, fits, case), result in zip(cases, json.loads(out.read_text())["rows"], strict=True):
        assert "invalid" not in result, (case, result)
        term = "prefill" if arg == "chunked_prefill_size" else "decode"
        assert (result["oracle"][term] <= result["cap"]) is fits, (arg, case, result)
        if fits:
            # Started, or refused by the other phase's bound only.
            assert result["accepted"] or result["oracle"][term] < result["required"], (case, result)
        else:
            assert not result["accepted"], (arg, case, result)


def test_clamped_pool_is_the_largest_that_fits(graded, spec, patched_root, tmp_path):
    """A request pool the check clamps is tight: with that --max-running-requests the
    decode rows fit by the oracle and the server starts unclamped; one more request
    per DP rank overflows by the oracle and is refused."""
    _, by_id, _ = graded
    rows = {r["id"]: r for r in spec[0]["rows"]}
    clamped = sorted((r for r in by_id["new"].values() if r.get("accepted") and r["log"]), key=lambda r: r["id"])
    assert clamped
    cases = []
    for result in clamped[:: max(len(clamped) // 8, 1)][:8]:
        row = rows[result["id"]]
        dp = row["args"].get("dp_size", 1) if row["args"].get("enable_dp_attention") else 1
        for delta, fits in ((0, True), (dp, False)):
            args = {**row["args"], "max_running_requests": result["max_running_requests"] + delta}
            case = {"id": len(cases), "config": len(cases), "model": row["model"], "args": args, "env": row["env"]}
            cases.append((fits, {**case, "cap": {"base": "fixed", "value": result["cap"]}}))
    path = tmp_path / "clamped.json"
    path.write_text(json.dumps({"models": grid.MODELS, "rows": [c for _, c in cases]}))
    out = tmp_path / "clamped-out.json"
    run_probe(patched_root("sglang"), PROBE, str(path), str(out))
    for (fits, case), result in zip(cases, json.loads(out.read_text())["rows"], strict=True):
        assert "invalid" not in result, (case, result)
        assert (result["oracle"]["decode"] <= result["cap"]) is fits, (case, result)
        assert result["accepted"] is fits, (case, result)
        if fits:
            assert not result["log"], (case, result)


# The reported failure configurations, one of each class, each through the real
# pipeline: (name, model, args, cap, stock's outcome, this series' outcome).
# Outcomes: "false accept", "false refusal", "refused", "accepted", "clamped".
TP8 = {"tp_size": 8, "ep_size": 8}
DP8 = {**TP8, "dp_size": 8, "enable_dp_attention": True}
REPORTED_ROWS = [
    ("pool above the graph, DP8", "k3_linear", {**DP8, "chunked_prefill_size": 4096}, 512, "false accept", "clamped"),
    ("pool above the graph, TP8", "k3_linear", {**TP8, "chunked_prefill_size": 2048}, 256, "false accept", "clamped"),
    (
        "no decode graph, DP8",
        "k3_linear",
        {**DP8, "chunked_prefill_size": 4096, "disable_decode_cuda_graph": True},
        512,
        "false accept",
        "clamped",
    ),
    (
        "PD decode node",
        "k3_linear",
        {**TP8, "disaggregation_mode": "decode", "chunked_prefill_size": 65536, "cuda_graph_max_bs_decode": 1024},
        128,
        "false accept",
        "clamped",
    ),
    (
        "PP2 dynamic chunking",
        "k3_linear",
        {**TP8, "pp_size": 2, "enable_dynamic_chunking": True, "chunked_prefill_size": 8192},
        64,
        "false accept",
        "refused",
    ),
    (
        "Qwen3-MoE DP2",
        "qwen3_moe",
        {**TP8, "dp_size": 2, "enable_dp_attention": True, "chunked_prefill_size": 16384},
        4096,
        "accepted",
        "accepted",
    ),
    (
        "EAGLE with the default pool, DP8",
        "k3_linear",
        {
            **DP8,
            "enable_dp_lm_head": True,
            "speculative_algorithm": "EAGLE",
            "speculative_draft_model_path": "draft",
            "speculative_num_draft_tokens": 4,
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "cuda_graph_max_bs_decode": 1024,
        },
        2048,
        "accepted",
        "accepted",
    ),
]


def _outcome(result):
    verdict = report.verdict(result)
    return verdict.replace("_", " ") if verdict != "ok" else report.outcome(result)


def test_reported_configurations(stock_root, patched_root, tmp_path):
    rows = [
        {"id": i, "config": i, "model": model, "args": args, "cap": {"base": "fixed", "value": cap}}
        for i, (_, model, args, cap, _, _) in enumerate(REPORTED_ROWS)
    ]
    spec = tmp_path / "reported.json"
    spec.write_text(json.dumps({"models": grid.MODELS, "rows": rows}))
    for series, root, column in (("stock", stock_root("sglang"), 4), ("new", patched_root("sglang"), 5)):
        out = tmp_path / f"{series}.json"
        run_probe(root, PROBE, str(spec), str(out))
        results = json.loads(out.read_text())["rows"]
        for row, result in zip(REPORTED_ROWS, results, strict=True):
            assert "invalid" not in result, (row[0], result)
            assert _outcome(result) == row[column], (series, row[0], result)
