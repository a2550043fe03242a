"""Kimi K3 MegaMoE token cap, hand-picked rows (patches/sglang/0001-0004, 0006-0008; the
grid over the whole space is test_k3_token_cap_grid.py).

Runs sglang 0.5.23's real startup hook (``validate_mega_moe_token_budget_for_model``
on real ``ServerArgs`` objects, after the real hooks the pipeline runs before it: a PD
node's graph roles and the DP handlers) and the real
``KimiK3MoE._forward_mega_experts`` in subprocess probes, once against the stock
tree and once against the patched one. The rows each K3 case can reach come from
the grid's oracle (k3_grid/oracle.py: sglang's own runtime code) on the same
configuration resolved by the whole pipeline; the table's rows document them.

Stubs (native kernels that cannot run on a CPU), used by the runtime probe only:
the ``deep_gemm`` module and ``sglang.kernels.ops.moe.dsv4.mega_moe_pre_dispatch``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import run_probe

sys.path.insert(0, str(Path(__file__).resolve().parent / "k3_grid"))
import grid  # noqa: E402

PROBES = Path(__file__).resolve().parent / "k3_cap_probes"
GRID_PROBE = Path(__file__).resolve().parent / "k3_grid" / "probe.py"
STARTUP = PROBES / "startup.py"
RUNTIME = PROBES / "runtime.py"

K3 = "KimiK3ForConditionalGeneration"
K3_LINEAR = "KimiK3LinearForCausalLM"
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
TP8 = {"tp_size": 8, "ep_size": 8, "chunked_prefill_size": 16384}
DSPARK = {"speculative_algorithm": "DSPARK", "speculative_num_draft_tokens": 8}
DECODE_FLAGS = "--max-running-requests"


def case(name, cap, *, arch=K3, decode_max_bs=48, **args):
    args = {**TP8, "max_running_requests": 48, **args}
    return {
        "name": name,
        "arch": arch,
        "cap": cap,
        "args": args,
        "decode_max_bs": decode_max_bs,
    }


# name -> (case, K3 rows per phase on the patched tree, expected outcome there:
# None to accept, else (required rows, bound that sets it, flags that lower it)).
TABLE = {
    # Upstream B300 recipe: TP8/EP8, DSPARK (gamma 7 -> 8 draft tokens, 48 running
    # requests, decode graph capped at 48), default 16384-token chunk: the chunk is
    # reduce-scattered over attention TP 8 -> 2048 rows per rank.
    "recipe": (
        case("recipe", 8320, **DSPARK),
        {"prefill": 2048, "decode": 48},
        None,
    ),
    "recipe_linear_arch": (
        case("recipe_linear_arch", 8320, arch=K3_LINEAR, **DSPARK),
        {"prefill": 2048, "decode": 48},
        None,
    ),
    "recipe_cap_at_bound": (
        case("recipe_cap_at_bound", 2048, **DSPARK),
        {"prefill": 2048, "decode": 48},
        None,
    ),
    "recipe_cap_below_bound": (
        case("recipe_cap_below_bound", 2047, **DSPARK),
        {"prefill": 2048, "decode": 48},
        (2048, "prefill", "--chunked-prefill-size."),
    ),
    # --disable-attn-tp-gather without DP attention: a batch whose rows do not
    # divide by attention TP stays whole; the largest such batch <= 16384 is 16383.
    "no_sp_split": (
        case("no_sp_split", 8320, disable_attn_tp_gather=True),
        {"prefill": 16383, "decode": 47},
        (
            16383,
            "prefill",
            "--chunked-prefill-size (or drop --disable-attn-tp-gather).",
        ),
    ),
    "no_sp_split_odd_chunk_at_bound": (
        case(
            "no_sp_split_odd_chunk_at_bound",
            8190,
            disable_attn_tp_gather=True,
            chunked_prefill_size=8190,
        ),
        {"prefill": 8190, "decode": 47},
        None,
    ),
    "no_sp_split_odd_chunk_below": (
        case(
            "no_sp_split_odd_chunk_below",
            8189,
            disable_attn_tp_gather=True,
            chunked_prefill_size=8190,
        ),
        {"prefill": 8190, "decode": 47},
        (8190, "prefill", "--chunked-prefill-size (or drop"),
    ),
    # DP attention TP8/DP8: attention TP 1, every rank gets its DP rank's whole
    # 2048-token chunk.
    "dp_attention_cap_384": (
        case("dp_attention_cap_384", 384, attn_dp_size=8),
        {"prefill": 2048, "decode": 6},
        (2048, "prefill", "--chunked-prefill-size."),
    ),
    "dp_attention_cap_at_bound": (
        case("dp_attention_cap_at_bound", 2048, attn_dp_size=8),
        {"prefill": 2048, "decode": 6},
        None,
    ),
    # DP2 keeps attention TP 4: 8192 per DP rank, scattered -> 2048; 24
    # requests per DP rank, scattered -> 6.
    "dp2_attention": (
        case("dp2_attention", 2047, attn_dp_size=2),
        {"prefill": 2048, "decode": 6},
        (2048, "prefill", "--chunked-prefill-size."),
    ),
    # Prefill CP 2: attention TP 8/2 = 4; a batch the CP strategy does not shard
    # keeps the whole chunk on every CP rank -> 16384 / 4.
    "prefill_cp": (
        case("prefill_cp", 4095, attn_cp_size=2, enable_prefill_cp=True),
        {"prefill": 4096, "decode": 12},
        (4096, "prefill", "--chunked-prefill-size."),
    ),
    "prefill_cp_at_bound": (
        case("prefill_cp_at_bound", 4096, attn_cp_size=2, enable_prefill_cp=True),
        {"prefill": 4096, "decode": 12},
        None,
    ),
    # PD: a prefill node checks only the prefill bound (pipeline.py runs
    # handle_cuda_graph_config before the check; its
    # apply_cuda_graph_disaggregation_roles drops the decode graphs the operator
    # did not lock, so none of the 4096-request decode shapes run here)...
    "pd_prefill_node": (
        case(
            "pd_prefill_node",
            2048,
            disaggregation_mode="prefill",
            attn_dp_size=8,
            max_running_requests=4096,
            **DSPARK,
        ),
        {"prefill": 2048},
        None,
    ),
    "pd_prefill_node_below": (
        case(
            "pd_prefill_node_below",
            2047,
            disaggregation_mode="prefill",
            attn_dp_size=8,
            max_running_requests=4096,
            **DSPARK,
        ),
        {"prefill": 2048},
        (2048, "prefill", "--chunked-prefill-size."),
    ),
    # ...a decode node only the decode one (its 8192-per-DP chunk is ignored):
    # 4096 requests / DP8 = 512 per DP rank x 8 draft tokens = 4096 rows.
    "pd_decode_node": (
        case(
            "pd_decode_node",
            4096,
            disaggregation_mode="decode",
            attn_dp_size=8,
            max_running_requests=4096,
            chunked_prefill_size=65536,
            **DSPARK,
        ),
        {"decode": 4096},
        None,
    ),
    "pd_decode_node_below": (
        case(
            "pd_decode_node_below",
            4095,
            disaggregation_mode="decode",
            attn_dp_size=8,
            max_running_requests=4096,
            chunked_prefill_size=65536,
            **DSPARK,
        ),
        {"decode": 4096},
        (4096, "decode", DECODE_FLAGS + " / --speculative-num-draft-tokens."),
    ),
    # Spec decoding on a colocated node: 8192 / DP8 = 1024 requests x 8 = 8192
    # rows outgrow the 2048-token chunk.
    "spec_decode": (
        case("spec_decode", 8191, attn_dp_size=8, max_running_requests=8192, **DSPARK),
        {"prefill": 2048, "decode": 8192},
        (8192, "decode", DECODE_FLAGS + " / --speculative-num-draft-tokens."),
    ),
    "no_spec_same_batch": (
        case("no_spec_same_batch", 2048, attn_dp_size=8, max_running_requests=8192),
        {"prefill": 2048, "decode": 1024},
        None,
    ),
    # Decode graph larger than the request pool: capture stops at the pool
    # (6 requests per DP rank), so the graph's max bs bounds nothing.
    "decode_graph_bound": (
        case("decode_graph_bound", 1023, attn_dp_size=8, decode_max_bs=1024),
        {"prefill": 2048, "decode": 6},
        (2048, "prefill", "--chunked-prefill-size."),
    ),
}

# K3 cases the table says overflow their cap (refused on the patched tree).
K3_OVERFLOWS = sorted(name for name, (_, _, outcome) in TABLE.items() if outcome)
GRID_MODEL = {K3: "k3", K3_LINEAR: "k3_linear", "Qwen3MoeForCausalLM": "qwen3_moe"}

# Non-K3 models keep the generic check, identical on both trees outside DP.
NON_K3 = [
    case("qwen3moe_tp8", 8320, arch="Qwen3MoeForCausalLM"),
    case("qwen3moe_tp8_full", 16384, arch="Qwen3MoeForCausalLM"),
    case("dsv4_tp8", 8192, arch="DeepseekV4ForCausalLM", **DSPARK),
    case("dsv3_no_budget", 1, arch="DeepseekV3ForCausalLM"),
    case(
        "qwen3moe_prefill_cp",
        8191,
        arch="Qwen3MoeForCausalLM",
        attn_cp_size=2,
        enable_prefill_cp=True,
    ),
    case(
        "qwen3moe_prefill_cp_below",
        4095,
        arch="Qwen3MoeForCausalLM",
        attn_cp_size=2,
        enable_prefill_cp=True,
    ),
]
# name -> (accepted on stock, accepted on the patched tree). The generic budget
# asked for the whole chunk on every rank; each rank's MoE gets its attention-TP
# shard of it: 16384 / 8 = 2048 rows.
NON_K3_EXPECTED = {
    "qwen3moe_tp8": (False, True),
    "qwen3moe_tp8_full": (True, True),
    "dsv4_tp8": (False, True),
    "dsv3_no_budget": (True, True),
    # Prefill CP 2 on TP8: attention TP 4. Only a CP extend splits its tokens over
    # CP (layer_boundary/layout.py: token_axis_sizes, _batch_shards_over_cp); any
    # other batch holds the whole chunk on every CP rank, and an a2a MoE runs on
    # its attention-TP shard (layer_boundary/factories.py: _resolve_ffn, rows
    # sharded over DP x CP x attention TP): 16384 / 4 = 4096 rows, as for K3.
    # Stock divides the chunk by CP instead (8192) and refuses 8191.
    "qwen3moe_prefill_cp": (False, True),
    "qwen3moe_prefill_cp_below": (False, False),
}
# Patch 0003: generic MegaMoE budget under DP attention (TP8/DP8, 16384 -> 2048
# per DP rank, attention TP 1: each rank's MoE gets 2048 rows).
GENERIC_DP = [
    case("qwen3moe_dp8_cap_384", 384, arch="Qwen3MoeForCausalLM", attn_dp_size=8),
    case("qwen3moe_dp8_cap_2047", 2047, arch="Qwen3MoeForCausalLM", attn_dp_size=8),
    case("qwen3moe_dp8_cap_2048", 2048, arch="Qwen3MoeForCausalLM", attn_dp_size=8),
]


ALL_CASES = [c for c, _, _ in TABLE.values()] + NON_K3 + GENERIC_DP
# Cases the grid's oracle resolves: the table, and the non-K3 ones of a grid model.
ORACLE_CASES = {name: c for name, (c, _, _) in TABLE.items()}
ORACLE_CASES.update({c["name"]: c for c in NON_K3 if c["arch"] in GRID_MODEL})
OVER, AT_CAP = "8321:8320", "8320:8320"  # rows:cap pairs of the runtime probe


@pytest.fixture(scope="module")
def patched(patched_root):
    return run_probe(patched_root("sglang"), STARTUP, json.dumps(ALL_CASES))


def _oracle_row(i, cfg):
    """The case as the whole pipeline takes it: what it needs to start and does not
    change its rows (a draft model, the DP LM head DSPARK asks for, a CP strategy)."""
    args = {**cfg["args"], "cuda_graph_max_bs_decode": cfg["decode_max_bs"]}
    if args.get("speculative_algorithm") == "DSPARK":
        args["speculative_draft_model_path"] = "draft"
        if args.get("attn_dp_size", 1) > 1:
            args["enable_dp_lm_head"] = True
    if args.get("enable_prefill_cp"):
        args["cp_strategy"] = "zigzag"
    model = GRID_MODEL[cfg["arch"]]
    return {"id": i, "config": i, "model": model, "args": args, "cap": {"base": "fixed", "value": cfg["cap"]}}


@pytest.fixture(scope="module")
def oracle(patched_root, tmp_path_factory):
    """name -> the grid probe's row on the patched tree: "reference" the oracle's rows
    per phase, "required" the most of them."""
    names = sorted(ORACLE_CASES)
    tmp = tmp_path_factory.mktemp("k3-table")
    rows = [_oracle_row(i, ORACLE_CASES[name]) for i, name in enumerate(names)]
    (tmp / "spec.json").write_text(json.dumps({"models": grid.MODELS, "rows": rows}))
    run_probe(patched_root("sglang"), GRID_PROBE, str(tmp / "spec.json"), str(tmp / "out.json"))
    results = json.loads((tmp / "out.json").read_text())["rows"]
    out = dict(zip(names, results, strict=True))
    for name, result in out.items():
        assert "invalid" not in result, (name, result)
    return out


@pytest.fixture(scope="module")
def stock(stock_root):
    return run_probe(stock_root("sglang"), STARTUP, json.dumps(ALL_CASES))


@pytest.fixture(scope="module")
def runtime(patched_root, stock_root):
    """(tree, flags) -> the runtime probe's results for OVER and AT_CAP: one process each."""
    cache = {}

    def get(tree, flags=()):
        if (tree, flags) not in cache:
            root = {"patched": patched_root, "stock": stock_root}[tree]("sglang")
            cache[tree, flags] = run_probe(root, RUNTIME, OVER, AT_CAP, flags=flags)
        return cache[tree, flags]

    return get


def test_table_rows_are_the_oracles(oracle):
    for name, (_, rows, _) in TABLE.items():
        reference = oracle[name]["reference"]
        assert rows == {phase: reference[phase] for phase in rows}, name
        assert {p for p in ("prefill", "decode") if reference[p] is not None} == set(rows), name
    overflows = sorted(name for name in TABLE if oracle[name]["required"] > TABLE[name][0]["cap"])
    assert overflows == K3_OVERFLOWS


@pytest.mark.parametrize("name", sorted(TABLE))
def test_patched_k3_startup(patched, oracle, name):
    cfg, rows, outcome = TABLE[name]
    result = patched[name]
    assert result["bounds"] == rows
    required = oracle[name]["required"]
    if outcome is None:
        assert result["accepted"], result["error"]
        assert cfg["cap"] >= required
        return
    table_required, term, flags = outcome
    assert not result["accepted"]
    assert table_required == required > cfg["cap"]
    error = result["error"]
    arch = cfg["arch"]
    assert error.startswith(f"{arch} with MegaMoE has no fallback for rows beyond {CAP_ENV}")
    assert f"{CAP_ENV}={cfg['cap']} is below the {required} rows one rank's MoE can" in error
    assert f"The {term} bound sets it: " in error
    assert f"Set {CAP_ENV} to at least {required}, " in error
    # No memory estimate: DeepGEMM sizes the symmetric buffer in its own code.
    assert "symmetric memory" not in error and "GiB" not in error, error
    assert f"or lower {flags.split()[0].rstrip('.')}" in error


def test_patched_dp_chunk_is_per_dp_rank(patched):
    assert patched["dp_attention_cap_384"]["chunk"] == 2048
    assert (
        "chunked_prefill_size=2048 per DP rank not split over attention TP"
        in (patched["dp_attention_cap_384"]["error"])
    )
    # The chunk the operator typed and the one whose 384 rows per rank fit.
    assert patched["dp_attention_cap_384"]["error"].endswith(
        "or lower --chunked-prefill-size from 16384 to 3072 (384 per DP rank)."
    )


def test_stock_accepts_overflowing_k3_configs(stock, oracle):
    """The bug: stock never checks K3, so every overflowing config starts."""
    assert len(K3_OVERFLOWS) >= 8
    for name in K3_OVERFLOWS:
        cfg, _, _ = TABLE[name]
        assert oracle[name]["required"] > cfg["cap"]
        assert stock[name]["accepted"] is True, (name, stock[name]["error"])
        assert stock[name]["bounds"] is None
    # The DP case: each rank receives 2048 rows, the cap is 384, stock starts.
    assert stock["dp_attention_cap_384"]["accepted"] is True


def test_stock_generic_dp_accepts_cap_384(stock, patched):
    """Patch 0003: stock divides the per-DP chunk again (2048 // 8 = 256)."""
    assert stock["qwen3moe_dp8_cap_384"]["accepted"] is True
    assert stock["qwen3moe_dp8_cap_2047"]["accepted"] is True
    for name in ("qwen3moe_dp8_cap_384", "qwen3moe_dp8_cap_2047"):
        assert patched[name]["accepted"] is False
        assert "is below the 2048 rows" in patched[name]["error"]
    assert patched["qwen3moe_dp8_cap_2048"]["accepted"] is True
    assert stock["qwen3moe_dp8_cap_2048"]["accepted"] is True


def test_non_k3_models(stock, patched, oracle):
    for c in NON_K3:
        name = c["name"]
        on_stock, on_patched = NON_K3_EXPECTED[name]
        assert stock[name]["accepted"] is on_stock, stock[name]
        assert patched[name]["accepted"] is on_patched, patched[name]
        if name not in oracle:
            continue
        required = oracle[name]["required"]
        assert on_patched is (required <= c["cap"]), (name, required)
        if not on_patched:
            assert f"is below the {required} rows" in patched[name]["error"], patched[name]


@pytest.mark.parametrize("flags", [(), ("-O",)], ids=["asserts", "python-O"])
def test_patched_runtime_cap(runtime, flags):
    """Rows over the cap run in two passes of at most the cap's rows (patch 0006)."""
    over, at_cap = runtime("patched", flags)[OVER], runtime("patched", flags)[AT_CAP]
    assert over["asserts"] is (not flags)
    assert over["error_type"] is None, over["error"]
    assert over["kernel_rows"] == [4161, 4160]
    assert over["out_rows"] == 8321
    assert at_cap["error_type"] is None, at_cap["error"]
    assert at_cap["kernel_rows"] == [8320]
    assert at_cap["out_rows"] == 8320


def test_stock_runtime_cap_vanishes_under_O(runtime):
    over = runtime("stock")[OVER]
    assert over["error_type"] == "AssertionError"
    # Under -O the check is gone: the fused kernel is launched with more rows
    # than its buffer holds.
    over_o = runtime("stock", ("-O",))[OVER]
    assert over_o["asserts"] is False
    assert over_o["error_type"] is None
    assert over_o["kernel_rows"] == [8321]
