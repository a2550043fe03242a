"""Kimi K3 MegaMoE: rows over the token cap run in passes every EP rank agrees on
(patches/sglang/0006).

Runs sglang 0.5.23's real ``KimiK3MoE._forward_mega_experts`` in subprocess probes,
on the stock and the patched tree, with DeepGEMM's fused MegaMoE kernel and the
``mega_moe_pre_dispatch`` JIT kernel (native CUDA code that cannot run on a CPU)
replaced by a reference MoE from the same expert weights
(k3_cap_probes/mega_moe_standin.py). On one rank (passes.py) and on 4 ranks over
gloo whose stand-in kernel is a real all-gather + all-reduce (passes_ranks.py).
Cost: about 75 s of CPU (2 to 3 minutes on a shared 2-core machine), almost all of it
five imports of sglang; the four ranks' rounds take about a second.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from helpers import run_probe

PROBES = Path(__file__).resolve().parent / "k3_cap_probes"
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
ROWS = 40
# rows:cap pairs: one pass (cap above and at the rows), 2, 4 and 5 passes, no rows.
ONE_PASS, AT_CAP = f"{ROWS}:64", f"{ROWS}:{ROWS}"
MULTI = [f"{ROWS}:39", f"{ROWS}:13", f"{ROWS}:8"]
EMPTY = "0:8"
PAIRS = [ONE_PASS, AT_CAP, *MULTI, EMPTY]
GLOO_TIMEOUT = "5"
RANK_CAP = 8  # passes_ranks.CAP


def close(result) -> bool:
    """The output is the reference MoE's, to bf16 precision."""
    return result["max_error"] <= 0.01 * max(result["max_ref"], 1.0)


@pytest.fixture(scope="module")
def one_rank(patched_root, stock_root):
    def run(tree, flags=()):
        root = {"patched": patched_root, "stock": stock_root}[tree]("sglang")
        return run_probe(root, PROBES / "passes.py", *PAIRS, flags=flags)

    return {"patched": run("patched"), "stock": run("stock"), "stock-O": run("stock", ("-O",))}


@pytest.fixture(scope="module")
def ranks(patched_root, stock_root):
    script = PROBES / "passes_ranks.py"
    patched = run_probe(patched_root("sglang"), script, "patched", "rank-local", GLOO_TIMEOUT)
    stock = run_probe(stock_root("sglang"), script, "stock", GLOO_TIMEOUT)
    return {**patched, **stock}


def test_k_passes_give_the_one_pass_output(one_rank):
    res = one_rank["patched"]
    assert res[ONE_PASS]["launches"] == [ROWS]
    assert res[AT_CAP]["launches"] == [ROWS]
    for pair in [ONE_PASS, AT_CAP, *MULTI]:
        assert res[pair]["error_type"] is None, res[pair]["error"]
        assert res[pair]["out"] == res[ONE_PASS]["out"], pair
        assert close(res[pair]), res[pair]
    for pair in MULTI:
        cap = int(pair.split(":")[1])
        launches = res[pair]["launches"]
        assert len(launches) == math.ceil(ROWS / cap), (pair, launches)
        assert sum(launches) == ROWS and max(launches) <= cap, (pair, launches)
    # No rows: one launch, as stock does, so an empty rank still meets its peers.
    assert res[EMPTY]["error_type"] is None and res[EMPTY]["launches"] == [0]


def test_one_warning_per_process(one_rank):
    (line,) = one_rank["patched"]["warnings"]
    assert line == (
        f"Kimi K3 MegaMoE: {ROWS} rows on the busiest EP rank exceed {CAP_ENV}=39; "
        "running the routed experts in 2 passes (tp=1 attn_tp=1 attn_dp=1 attn_cp=1 ep=1). "
        "The startup check did not foresee this shape. "
        f"Set {CAP_ENV} to at least {ROWS} to run it in one pass. Logged once per process."
    )


def test_stock_fails_over_the_cap(one_rank):
    """Stock asserts; under -O the assert is gone and the rows overflow the buffer."""
    stock, stock_o = one_rank["stock"], one_rank["stock-O"]
    assert stock[ONE_PASS]["out"] == one_rank["patched"][ONE_PASS]["out"]
    for pair in MULTI:
        assert stock[pair]["error_type"] == "AssertionError", stock[pair]
        assert stock[pair]["launches"] == []
        assert stock_o[pair]["error_type"] == "RuntimeError", stock_o[pair]
        assert "overflow the" in stock_o[pair]["error"]


def _rounds(result):
    """Round index -> {rank: round}, for ranks that reported."""
    by_round = {}
    for rank, out in result["ranks"].items():
        for i, rnd in enumerate(out["rounds"]):
            by_round.setdefault(i, {})[rank] = rnd
    return by_round


def test_every_rank_runs_the_same_passes(ranks):
    res = ranks["patched"]
    assert res["hung"] == []
    assert {rank: out["error"] for rank, out in res["ranks"].items()} == {str(r): None for r in range(4)}
    rounds = _rounds(res)
    assert len(rounds) == len(ranks["plan"]) == 12
    layouts = set()
    for i, (layout, _fields, _counts, rows) in enumerate(ranks["plan"]):
        layouts.add(layout)
        passes = {len(r["launches"]) for r in rounds[i].values()}
        assert passes == {max(1, math.ceil(max(rows) / RANK_CAP))}, (layout, rows, rounds[i])
        for rank, rnd in rounds[i].items():
            assert rnd["rows"] == rows[int(rank)] == rnd["out_rows"] == sum(rnd["launches"])
            assert max(rnd["launches"]) <= RANK_CAP
            assert close(rnd), (layout, rank, rnd)
    assert layouts == {"dp4", "dp2_sp", "tp4_sp", "tp4_unpadded"}
    # The plan holds empty ranks next to ranks over the cap, and unequal DP ranks.
    dp4 = [rows for layout, _, _, rows in ranks["plan"] if layout == "dp4"]
    assert all(min(rows) == 0 and max(rows) > RANK_CAP for rows in dp4)


def test_a_rank_local_pass_count_breaks_the_exchange(ranks):
    """Each rank counting passes from its own rows: ranks enter the fused exchange a
    different number of times, so collectives pair across layers and rounds and
    fail (or would wait forever for a peer)."""
    res = ranks["rank-local"]
    # The first round already holds ranks over the cap next to empty ones.
    rows = ranks["plan"][0][3]
    assert len({max(1, math.ceil(n / RANK_CAP)) for n in rows}) > 1, rows
    failed = [rank for rank, out in res["ranks"].items() if out["error"]]
    assert failed or res["hung"], res
    assert all("gloo" in res["ranks"][r]["error"] or "timed out" in res["ranks"][r]["error"].lower() for r in failed)


def test_stock_ranks_over_the_cap_assert(ranks):
    res = ranks["stock"]
    errors = {rank: out["error"] for rank, out in res["ranks"].items()}
    rows = ranks["plan"][0][3]
    for rank, n in enumerate(rows):
        if n > RANK_CAP:
            assert errors[str(rank)].startswith(f"AssertionError: mega MoE: num_tokens={n} exceeds {CAP_ENV}=8")
