#!/usr/bin/env python3
"""Host CPU time per forward step and rank spent turning the per-expert count list
into a GPU tensor, before and after the fast caller path, for real MoE configs.

What it is: the DeepGEMM MoE runner (DeepEP normal mode) calls the conversion once
per MoE layer per forward step on every rank, so the time per step is
(MoE layers) x (host µs per call at N = local experts), with the per-call times
measured by bench_copy.py on the H200 (one value per paired block, so the step
time gets the same spread). It is NOT an end-to-end serving number: it does not
say how much of this time the GPU spends waiting, nor covers CUDA-graph decode.

  python benchmarks/caller_cost.py --bench results/<run>/bench_copy_counts.json --out-dir results/<run>
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# (name, MoE layers, routed experts, EP size, source of the layer/expert counts)
MODELS = (
    (
        "GLM-5.2 FP8, EP16 (README launch 1)",
        75,
        256,
        16,
        "78 decoder layers, first 3 dense, 256 routed experts (GlmMoeDsaForCausalLM; NVIDIA NeMo "
        "Megatron-Bridge GLM-5 notes and NeMo AutoModel GLM-5 page: GLM-5.2/5.3 share GLM-5's architecture)",
    ),
    (
        "DeepSeek-V3, EP8",
        58,
        256,
        8,
        "deepseek-ai/DeepSeek-V3 config.json: num_hidden_layers 61, first_k_dense_replace 3, "
        "n_routed_experts 256 (the MTP layer is not counted)",
    ),
    (
        "DeepSeek-V3, EP16",
        58,
        256,
        16,
        "as above, 16 ranks",
    ),
)
BRANCHES = (
    ("no copy engine (CPU OffloaderV2)", "caller_no_ce", "sglang_no_ce"),
    ("copy engine (default)", "caller_pinned", "sglang_pinned"),
)


def step_cost(bench: dict, bench_file: str) -> list[dict]:
    rows = []
    for name, layers, experts, ep, source in MODELS:
        n = experts // ep
        res = bench["results"].get(str(n))
        if res is None:
            raise SystemExit(f"caller_cost: {bench_file} has no N = {n} (local experts of {name})")
        for branch, before, after in BRANCHES:
            per_block = {m: [b[m]["host_us"] * layers for b in res["blocks"]] for m in (before, after)}
            rows.append(
                {
                    "model": name,
                    "moe_layers": layers,
                    "routed_experts": experts,
                    "ep_size": ep,
                    "local_experts": n,
                    "source": source,
                    "branch": branch,
                    "before_method": before,
                    "after_method": after,
                    "before_us_per_call": statistics.median(b[before]["host_us"] for b in res["blocks"]),
                    "after_us_per_call": statistics.median(b[after]["host_us"] for b in res["blocks"]),
                    "before_us_per_step": statistics.median(per_block[before]),
                    "after_us_per_step": statistics.median(per_block[after]),
                    "before_range": [min(per_block[before]), max(per_block[before])],
                    "after_range": [min(per_block[after]), max(per_block[after])],
                    "saved_us_per_step": statistics.median(a - b for a, b in zip(per_block[before], per_block[after])),
                    "samples_us_per_step": per_block,
                }
            )
    return rows


def to_markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# Host CPU time per forward step and rank in the count-list conversion",
        "",
        "Computed, not measured end to end: (MoE layers) × (host µs per call at N = local experts) from "
        f"`{report['bench']}` ({m.get('gpu')}, torch {m.get('torch')}, CUDA {m.get('cuda')}, {m.get('date')}; "
        f"values: {report['values']}). One call per MoE layer per forward step (DeepEP normal mode); "
        "median over the benchmark's paired blocks, [min–max] across blocks. It does not say how much of it "
        "the GPU waits for, and does not cover CUDA-graph decode steps.",
        "",
        "| model | N | MoE layers | branch | before µs/call | after µs/call | before µs/step | after µs/step | saved µs/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['model']} | {r['local_experts']} | {r['moe_layers']} | {r['branch']} | "
            f"{r['before_us_per_call']:.2f} | {r['after_us_per_call']:.2f} | "
            f"{r['before_us_per_step']:.0f} [{r['before_range'][0]:.0f}–{r['before_range'][1]:.0f}] | "
            f"{r['after_us_per_step']:.0f} [{r['after_range'][0]:.0f}–{r['after_range'][1]:.0f}] | "
            f"{r['saved_us_per_step']:.0f} |"
        )
    lines += ["", "Layer and expert counts:", ""]
    seen = set()
    for r in report["rows"]:
        if r["model"] not in seen:
            seen.add(r["model"])
            lines.append(f"- {r['model']}: {r['source']}")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    labels = [f"{r['model']}\n{r['branch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [r["before_us_per_step"] for r in rows], height=0.4, label="before (stock caller)")
    ax.barh([y - 0.2 for y in ys], [r["after_us_per_step"] for r in rows], height=0.4, label="after (fast caller path)")
    ax.set_yticks(list(ys), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("host µs per forward step per rank (computed: layers × measured µs per call)")
    ax.legend()
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True, help="bench_copy.py JSON")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    bench = json.loads(Path(args.bench).read_text())
    report = {
        "what": "computed host CPU time per forward step and rank in the count-list conversion; not end to end",
        "bench": Path(args.bench).name,
        "machine": bench["machine"],
        "values": bench["config"].get("values", "full"),
        "rows": step_cost(bench, args.bench),
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "caller_cost.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "caller_cost.md").write_text(to_markdown(report))
    try:
        plot(report, out / "caller_cost.png")
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
    print(to_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
