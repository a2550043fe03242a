"""Judge the grid probes' rows against the oracle and summarise them (stdlib only).

A row is one configuration with one cap. Verdicts, per series:
- false accept: the server starts (possibly with a clamped request pool) and the
  oracle, on the configuration it starts with, says one rank's MoE can receive
  more rows than the cap;
- false refusal: startup refuses, and the oracle, on the configuration as given
  (no MegaMoE check at all), says no rank ever receives more than the cap.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from grid import K3_MODELS

SERIES = ("stock", "new")

# The reported failure classes (configurations that started and later overflowed the cap, or
# that were refused wrongly), as classes of the grid.
REPORTED_CLASSES = {
    "k3-pool-unset": "K3, --max-running-requests unset, decode rows from the request pool",
    "k3-pd-decode": "K3 PD decode node",
    "k3-dynamic-chunking": "K3, PP with --enable-dynamic-chunking",
    "other-dp-attn-tp": "non-K3, attention DP with attention TP > 1",
    "k3-spec-default-pool": "K3, speculative decoding with the spec hook's default request pool",
    "k3-cp-zigzag": "K3, attention CP with the zigzag strategy",
    "k3-cp-interleave": "K3, attention CP with the interleave strategy",
    "k3-spec-adaptive": "K3, adaptive speculative decoding (--speculative-adaptive)",
    "k3-pd-locked-other-phase": "K3 PD node with the other phase's graph backend locked",
    "k3-warmup-pp-deepgemm": "K3, SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP=1",
    "k3-warmup-autotune-extend": "K3, SGLANG_FLASHINFER_AUTOTUNE_EXTEND=1",
    "k3-draft-moe": "K3, a draft whose MoE runs through MegaMoE (NEXTN)",
    "k3-spec-topk": "K3, EAGLE top-k > 1",
    "k3-chunk-disabled": "K3, --chunked-prefill-size -1 (PrefillAdder's admission bounds the batch)",
    "k3-spec-eagle3": "K3, EAGLE3",
    "k3-spec-ngram": "K3, NGRAM",
    "k3-spec-standalone": "K3, STANDALONE with a dense draft",
    "k3-spec-standalone-moe": "K3, STANDALONE with a MoE draft (its a2a backend the target's)",
    "k3-graph-bs-explicit": "K3, explicit --cuda-graph-bs-decode",
    "k3-context-length": "K3, explicit --context-length",
    "k3-page-size": "K3, --page-size 16 / 64",
    "k3-tp32": "K3, TP 32",
    "k3-pp4": "K3, PP 4",
}

# Shapes beyond a phase's own batches (the CP strategy's padding, adaptive
# verify widths, draft top-k rows, a PD node's locked other phase, opt-in warmups).
NEW_AXES = (
    "k3-cp-zigzag",
    "k3-cp-interleave",
    "k3-spec-adaptive",
    "k3-pd-locked-other-phase",
    "k3-warmup-pp-deepgemm",
    "k3-warmup-autotune-extend",
    "k3-draft-moe",
    "k3-spec-topk",
    "k3-chunk-disabled",
)
# Draft top-k above the draft tokens: a dense draft's top-k rows skip MegaMoE, a
# MoE draft's reach it (reported in the class table; few rows each).
DRAFT_AXES = ("k3-topk-rows-dense-draft", "k3-topk-rows-moe-draft")
# Grid axes of configurations the check already bounds (no new shape of its own).
GRID_AXES = (
    "k3-spec-eagle3",
    "k3-spec-ngram",
    "k3-spec-standalone",
    "k3-spec-standalone-moe",
    "k3-graph-bs-explicit",
    "k3-context-length",
    "k3-page-size",
    "k3-tp32",
    "k3-pp4",
)


def tags(row: dict) -> list[str]:
    """The classes a row belongs to (a row can be in several)."""
    args, ref = row["args"], row["reference"]
    k3 = row["model"] in K3_MODELS
    family = "k3" if k3 else "other"
    out = [family]
    dp = args.get("dp_size", 1) if args.get("enable_dp_attention") else 1
    if dp > 1:
        out.append(f"{family}-dp-attention")
        if ref["attn_tp"] > 1:
            out.append(f"{family}-dp-attn-tp")
    elif ref["attn_tp"] > 1:
        out.append(f"{family}-attn-tp")
    if args.get("enable_prefill_cp"):
        out.append(f"{family}-prefill-cp")
        out.append(f"{family}-cp-{args.get('cp_strategy', 'zigzag')}")
    if args.get("disable_attn_tp_gather"):
        out.append(f"{family}-disable-attn-tp-gather")
    if args["tp_size"] == 32:
        out.append(f"{family}-tp32")
    if args.get("pp_size", 1) == 4:
        out.append(f"{family}-pp4")
    if "cuda_graph_bs_decode" in args:
        out.append(f"{family}-graph-bs-explicit")
    if "context_length" in args:
        out.append(f"{family}-context-length")
    if "page_size" in args:
        out.append(f"{family}-page-size")
    if args.get("pp_size", 1) > 1:
        out.append(f"{family}-pp")
        if args.get("enable_dynamic_chunking"):
            out.append(f"{family}-dynamic-chunking")
    if args.get("enable_mixed_chunk"):
        out.append(f"{family}-mixed-chunk")
    if args.get("speculative_algorithm"):
        out.append(f"{family}-spec")
        if "max_running_requests" not in args:
            out.append(f"{family}-spec-default-pool")
        if args.get("speculative_adaptive"):
            out.append(f"{family}-spec-adaptive")
        algorithm = args["speculative_algorithm"]
        if args.get("speculative_eagle_topk", 1) > 1:
            out.append(f"{family}-spec-topk")
            if algorithm != "NGRAM" and args["speculative_eagle_topk"] > args.get("speculative_num_draft_tokens", 1):
                moe = algorithm == "NEXTN" or args.get("speculative_draft_model_path") == "draft_moe"
                out.append(f"{family}-topk-rows-{'moe' if moe else 'dense'}-draft")
        if algorithm == "NEXTN":
            out.append(f"{family}-draft-moe")
        elif algorithm == "STANDALONE":
            moe = args["speculative_draft_model_path"] == "draft_moe"
            out.append(f"{family}-spec-standalone" + ("-moe" if moe else ""))
        elif algorithm in ("EAGLE3", "NGRAM"):
            out.append(f"{family}-spec-{algorithm.lower()}")
    mode = args.get("disaggregation_mode")
    if mode:
        out.append(f"{family}-pd-{mode}")
        other = {"prefill": "decode", "decode": "prefill"}[mode]
        if args.get(f"cuda_graph_backend_{other}"):
            out.append(f"{family}-pd-locked-other-phase")
    env = row.get("env", {})
    if env.get("SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP") and args.get("pp_size", 1) > 1:
        out.append(f"{family}-warmup-pp-deepgemm")
    if env.get("SGLANG_FLASHINFER_AUTOTUNE_EXTEND"):
        out.append(f"{family}-warmup-autotune-extend")
    if "max_running_requests" not in args and mode != "prefill":
        out.append(f"{family}-pool-unset")
    if args.get("disable_decode_cuda_graph"):
        out.append(f"{family}-decode-graph-off")
    chunk = args.get("chunked_prefill_size")
    if chunk is not None and chunk <= 0:
        out.append(f"{family}-chunk-disabled")
    return out


def verdict(result: dict) -> str:
    if result["accepted"]:
        return "false_accept" if result["required"] > result["cap"] else "ok"
    return "false_refusal" if result["required"] <= result["cap"] else "ok"


def outcome(result: dict) -> str:
    if not result["accepted"]:
        return "refused"
    return "clamped" if result["log"] else "accepted"


PP_WARMUP_CAUSE = "SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP refused: its rows follow the device's SM count"
_AT_LEAST = re.compile(r"(?:at least|required_per_rank=)(\d+)")


def refusal_cause(row: dict, result: dict) -> str:
    """Why a series refused a row the oracle says fits (from the refusal text
    and the oracle's own numbers)."""
    error = result["error"] or ""
    asked = _AT_LEAST.search(error)
    asked = int(asked.group(1)) if asked else None
    ref = row["reference"]
    k3 = row["model"] in K3_MODELS
    if "SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP=1" in error:
        return PP_WARMUP_CAUSE
    if not k3:
        if "decode / verify forward" in error:
            if "decode graph" in error or "graph bucket" in error:
                return "generic decode budget: decode graph max bs x tokens per request, not split over attention TP"
            return "generic decode budget above the rows the runtime forms"
        if "token_partition=none" in error:
            return "generic prefill budget without attention DP: the chunk padded to attention TP, not split over it"
        if "token_partition=attn_dp_size" in error:
            return "generic prefill budget under attention DP: the per-DP chunk not split over attention TP"
        if "token_partition=attn_cp_size" in error:
            return "generic prefill budget under prefill CP: the chunk divided by attention CP, not split over attention TP"
        if "token_partition=attn_tp_size" in error:
            return "generic prefill budget on the attention-TP shard above the rows the runtime forms"
        return "generic budget"
    if "The decode bound" in error:
        if "decode cuda graph max bs" in error:
            return "K3 decode bound: max(decode graph max bs, request pool) taken as the batch"
        return "K3 decode bound above the rows the runtime forms"
    if "The prefill bound" in error and ref.get("unpadded"):
        return "K3 unpadded prefill bound above the largest unpadded batch the runtime forms"
    return f"other (asked {asked}, oracle {ref.get('prefill')}/{ref.get('decode')})"


def judge(spec: dict, results: dict[str, dict]) -> dict:
    """results: series -> probe output. Returns the summary document."""
    rows = spec["rows"]
    by_series = {s: {r["id"]: r for r in results[s]["rows"]} for s in SERIES}
    valid = [r for r in rows if "invalid" not in by_series["stock"][r["id"]]]
    doc = {
        "seed": spec["seed"],
        "configs": len(valid),
        "distinct_configurations": len({r["config"] for r in valid}),
        "invalid": len(rows) - len(valid),
        "invalid_reasons": dict(
            Counter(
                by_series["stock"][r["id"]]["invalid"].split(":")[0]
                + ": "
                + by_series["stock"][r["id"]]["invalid"].split(": ", 1)[-1][:90]
                for r in rows
                if "invalid" in by_series["stock"][r["id"]]
            ).most_common()
        ),
        "series": {},
        "classes": {},
        "false_refusals": {},
        "false_accept_rows": {},
        "non_k3_changes": {},
    }
    class_counts = defaultdict(lambda: {s: Counter() for s in SERIES})
    for series in SERIES:
        counts = Counter()
        refusals, accepts = [], []
        for row in valid:
            result = by_series[series][row["id"]]
            row = {**row, "reference": result["reference"]}
            v, o = verdict(result), outcome(result)
            counts[v] += 1
            counts[o] += 1
            for tag in tags(row):
                class_counts[tag][series]["configs"] += 1
                class_counts[tag][series][v] += 1
            entry = {
                "id": row["id"],
                "model": row["model"],
                "args": row["args"],
                "cap": result["cap"],
                "oracle": {k: result["oracle"].get(k) for k in ("prefill", "decode")},
            }
            if v == "false_refusal":
                refusals.append({**entry, "cause": refusal_cause(row, result)})
            elif v == "false_accept":
                accepts.append(entry)
        doc["series"][series] = {
            "configs": len(valid),
            "accepted": counts["accepted"],
            "clamped": counts["clamped"],
            "refused": counts["refused"],
            "false_accepts": counts["false_accept"],
            "false_refusals": counts["false_refusal"],
            "false_refusal_causes": dict(Counter(r["cause"] for r in refusals).most_common()),
        }
        doc["false_refusals"][series] = refusals if series == "new" else len(refusals)
        doc["false_accept_rows"][series] = accepts if series == "new" else len(accepts)
    for tag in sorted(class_counts):
        doc["classes"][tag] = {
            s: {
                "configs": class_counts[tag][s]["configs"],
                "false_accepts": class_counts[tag][s]["false_accept"],
                "false_refusals": class_counts[tag][s]["false_refusal"],
            }
            for s in SERIES
        }
    changes = Counter()
    for row in valid:
        if row["model"] in K3_MODELS:
            continue
        stock, new = by_series["stock"][row["id"]], by_series["new"][row["id"]]
        if outcome(stock) == outcome(new):
            continue
        change = f"stock {verdict(stock).replace('_', ' ')}: {outcome(stock)} -> {outcome(new)}"
        if "SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP=1" in (new["error"] or ""):
            change += " (SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP refused)"
        changes[change] += 1
    doc["non_k3_changes"] = dict(changes.most_common())
    return doc


def markdown(doc: dict, seconds: float) -> str:
    s = doc["series"]
    lines = [
        "# Kimi K3 / MegaMoE token cap: configuration grid",
        "",
        "Made by `make k3-grid` (tests/sglang/test_k3_token_cap_grid.py; `make test` checks it). Every row is one",
        "configuration and one `SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK`, resolved",
        "by sglang 0.5.23's real `ServerArgs` pipeline (fake `config.json` directories, SM90",
        "platform and 141 GiB spoofed), once on the stock tree and once with this series",
        "(patches/sglang). The expected rows come",
        "from the oracle (tests/sglang/k3_grid/oracle.py), which calls sglang's own runtime",
        "code: request pool (`resolve_max_num_reqs`), decode graph buckets",
        "(`get_batch_sizes_to_capture`), eager padding, speculative verify width, prefill buffer",
        "ceiling (`max_prefill_buffer_tokens`), the layer-boundary split decisions, the CP",
        "strategy's padding (`get_cp_padding_align_size`), every adaptive step's verify width",
        "(`resolve_max_speculative_num_draft_tokens`), a PD node's locked other-phase graphs,",
        "the opt-in warmups' shapes, the largest batch the real `PrefillAdder` admits with",
        "chunked prefill disabled, and a draft's top-k rows only where its MoE runs MegaMoE.",
        "",
        f"Seed {doc['seed']}: {doc['configs']} rows ({doc['distinct_configurations']} distinct",
        f"configurations x caps at and around each bound and fixed caps); {doc['invalid']} more",
        "rows are configurations upstream refuses for other reasons (listed in the JSON).",
        "Run time of the whole grid (two probe processes at once, on a shared",
        f"2-core machine): {seconds:.0f} s.",
        "",
        "| series | rows | accepted | accepted, request pool clamped | refused | false accepts | false refusals |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in SERIES:
        x = s[name]
        lines.append(
            f"| {name} | {x['configs']} | {x['accepted']} | {x['clamped']} | {x['refused']} "
            f"| {x['false_accepts']} | {x['false_refusals']} |"
        )
    lines += [
        "",
        "## The reported failure classes",
        "",
        "| class | rows | false accepts (stock / new) | false refusals (stock / new) |",
        "|---|---:|---|---|",
    ]
    for tag, label in REPORTED_CLASSES.items():
        c = doc["classes"].get(tag)
        if not c:
            continue
        fa = " / ".join(str(c[x]["false_accepts"]) for x in SERIES)
        fr = " / ".join(str(c[x]["false_refusals"]) for x in SERIES)
        lines.append(f"| {label} (`{tag}`) | {c['new']['configs']} | {fa} | {fr} |")
    lines += [
        "",
        "## Every class",
        "",
        "| class | rows | false accepts (stock / new) | false refusals (stock / new) |",
        "|---|---:|---|---|",
    ]
    for tag, c in doc["classes"].items():
        fa = " / ".join(str(c[x]["false_accepts"]) for x in SERIES)
        fr = " / ".join(str(c[x]["false_refusals"]) for x in SERIES)
        lines.append(f"| `{tag}` | {c['new']['configs']} | {fa} | {fr} |")
    lines += ["", "## False refusals of this series, by cause", ""]
    causes = s["new"]["false_refusal_causes"]
    if not causes:
        lines.append("None.")
    for cause, n in causes.items():
        lines.append(f"- {n}: {cause}")
    lines += [
        "",
        "Each one, with its configuration, is in `docs/k3-token-cap-grid.json`",
        "(`false_refusals.new`).",
        "",
        "## Non-K3 decisions that differ from stock",
        "",
    ]
    if not doc["non_k3_changes"]:
        lines.append("None.")
    for change, n in doc["non_k3_changes"].items():
        lines.append(f"- {n}: {change}")
    if any(c.startswith("stock ok") for c in doc["non_k3_changes"]):
        lines += [
            "",
            "`stock ok: refused -> clamped`: stock refused a configuration whose request pool was",
            "left unset (rightly: the pool the server would size overflows the cap); this series",
            "starts it with `max_running_requests` lowered until the decode rows fit, as for K3, and",
            "logs one line. `(SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP refused)`: this series refuses",
            "that opt-in warmup under PP (its rows follow the device's SM count). No other",
            "non-K3 decision differs from stock where stock was right.",
        ]
    lines.append("")
    return "\n".join(lines)


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
