"""The configuration grid of the K3 / MegaMoE token-cap test: fixed seed, plain data.

Standard library only (the test process builds it; the probe resolves it).
"""

from __future__ import annotations

import random

SEED = 20261130

_K3_TEXT = {
    "model_type": "kimi_linear",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 1000,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "max_position_embeddings": 131072,
    "num_experts": 64,
    "num_experts_per_token": 4,
    "moe_intermediate_size": 256,
    "intermediate_size": 1024,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "q_lora_rank": 512,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_nextn_predict_layers": 1,
    "linear_attn_config": {
        "kda_layers": [1, 2, 3],
        "full_attn_layers": [4],
        "head_dim": 128,
        "num_heads": 16,
        "short_conv_kernel_size": 4,
    },
    "torch_dtype": "bfloat16",
}

# Small stand-ins for the checkpoints' config.json: only the fields resolution reads.
MODELS = {
    "k3_linear": {"architectures": ["KimiK3LinearForCausalLM"], **_K3_TEXT},
    "k3": {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "text_config": {**_K3_TEXT},
        "torch_dtype": "bfloat16",
    },
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "vocab_size": 1000,
        "max_position_embeddings": 40960,
        "num_experts": 64,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 256,
        "intermediate_size": 1024,
        "decoder_sparse_step": 1,
        "torch_dtype": "bfloat16",
    },
    "qwen2_moe": {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 1000,
        "max_position_embeddings": 32768,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 256,
        "shared_expert_intermediate_size": 1024,
        "intermediate_size": 1024,
        "decoder_sparse_step": 1,
        "torch_dtype": "bfloat16",
    },
    # Draft model of the EAGLE / DSPARK rows.
    "draft": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 1,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 1000,
        "max_position_embeddings": 131072,
        "intermediate_size": 1024,
        "torch_dtype": "bfloat16",
    },
}
# Draft model of the STANDALONE rows that have MoE layers: its MoE goes through the
# target's a2a backend (speculative_moe_a2a_backend unset).
MODELS["draft_moe"] = {**MODELS["qwen3_moe"], "max_position_embeddings": 131072}
K3_MODELS = ("k3_linear", "k3")
OTHER_MODELS = ("qwen3_moe", "qwen2_moe")

CHUNKS = [None, -1, 1024, 2048, 4096, 4095, 8190, 8192, 12289, 16383, 16384, 65536]
CAPS = [64, 128, 256, 384, 512, 1024, 2048, 4096, 8192, 8320, 16384]


def _config(rng: random.Random) -> dict:
    k3 = rng.random() < 0.75
    model = rng.choice(K3_MODELS if k3 else OTHER_MODELS)
    tp = rng.choice([1, 2, 4, 8, 8, 8, 16, 32])
    args = {"tp_size": tp, "ep_size": tp}
    dp = rng.choice([d for d in (1, 1, 2, 4, 8, 16) if tp % d == 0])
    if dp > 1 and tp > 1:
        args.update(dp_size=dp, enable_dp_attention=True)
    if tp // dp >= 2 and rng.random() < 0.2:
        args.update(
            attn_cp_size=rng.choice([c for c in (2, 2, 4) if tp // dp >= c]),
            enable_prefill_cp=True,
            cp_strategy=rng.choice(["zigzag", "interleave"]),
        )
    if rng.random() < 0.25:
        args["disable_attn_tp_gather"] = True
    chunk = rng.choice(CHUNKS + [rng.randrange(512, 20000)])
    if chunk is not None:
        args["chunked_prefill_size"] = chunk
    if rng.random() < 0.2:
        args["pp_size"] = rng.choice([2, 2, 4])
    if rng.random() < 0.2:
        args["enable_dynamic_chunking"] = True
    if rng.random() < 0.15:
        args["enable_mixed_chunk"] = True
    # Without a chunk, --max-prefill-tokens and --context-length set the prefill batch.
    unchunked = chunk is not None and chunk <= 0
    if rng.random() < (0.7 if unchunked else 0.25):
        args["max_prefill_tokens"] = rng.choice([8192, 16384, 65536])
    algorithms = ["EAGLE", "NEXTN", "DSPARK", "EAGLE3"]
    if "enable_dp_attention" not in args:
        # Upstream refuses NGRAM and STANDALONE under DP attention.
        algorithms += ["NGRAM", "STANDALONE"]
    spec = rng.choice([None] * 4 + algorithms)
    if spec is not None:
        args["speculative_algorithm"] = spec
        if spec == "STANDALONE":
            args["speculative_draft_model_path"] = rng.choice(["draft", "draft_moe"])
        elif spec not in ("NEXTN", "NGRAM"):
            args["speculative_draft_model_path"] = "draft"
        if spec in ("DSPARK", "NGRAM") or rng.random() < 0.7:
            draft = rng.choice([2, 3, 4, 8])
            args["speculative_num_draft_tokens"] = draft
            if spec not in ("DSPARK", "NGRAM"):
                topk = 1 if rng.random() < 0.8 else rng.choice([2, 4])
                args.update(speculative_num_steps=draft - 1, speculative_eagle_topk=topk)
        if spec == "EAGLE" and args.get("speculative_eagle_topk", 1) == 1 and rng.random() < 0.3:
            args["speculative_adaptive"] = True
        if spec == "DSPARK" and "enable_dp_attention" in args:
            args["enable_dp_lm_head"] = True
    if rng.random() < 0.15:
        args["disable_decode_cuda_graph"] = True
    elif rng.random() < 0.15:
        bs = rng.sample([1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512], rng.randint(1, 5))
        args["cuda_graph_bs_decode"] = sorted(bs)
    elif rng.random() < 0.6:
        args["cuda_graph_max_bs_decode"] = rng.choice([8, 48, 160, 512, 1024])
    if rng.random() < 0.5:
        args["max_running_requests"] = rng.choice([8, 48, 64, 256, 600, 1024, 4096])
    if rng.random() < (0.6 if unchunked else 0.15):
        args["context_length"] = rng.choice([2048, 8192, 32768])
    # Upstream refuses a paged KV cache with top-k > 1 (NGRAM's BFS breadth is its top-k).
    if rng.random() < 0.15 and spec != "NGRAM" and args.get("speculative_eagle_topk", 1) == 1:
        args["page_size"] = rng.choice([16, 64])
    role = rng.random()
    if role < 0.15:
        args["disaggregation_mode"] = "prefill"
        if rng.random() < 0.3:
            args["cuda_graph_backend_decode"] = "full"
    elif role < 0.3:
        args["disaggregation_mode"] = "decode"
        if rng.random() < 0.3:
            args["cuda_graph_backend_prefill"] = rng.choice(["full", "breakable"])
    env = {}
    if args.get("pp_size", 1) > 1 and rng.random() < 0.15:
        env["SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP"] = "1"
    if rng.random() < 0.06:
        env["SGLANG_FLASHINFER_AUTOTUNE_EXTEND"] = "1"
    return {"model": model, "args": args, "env": env}


def _caps(rng: random.Random, n: int) -> list[dict]:
    choices = [
        {"base": "prefill", "delta": 0},
        {"base": "prefill", "delta": -1},
        {"base": "prefill", "delta": 1},
        {"base": "decode", "delta": 0},
        {"base": "decode", "delta": -1},
        {"base": "decode", "delta": 1},
        {"base": "fixed", "value": rng.choice(CAPS)},
        {"base": "fixed", "value": rng.choice(CAPS)},
    ]
    return rng.sample(choices, n)


def build(num_configs: int, caps_per_config: int = 3, seed: int = SEED) -> dict:
    """{"models": MODELS, "rows": [...]}: num_configs x caps_per_config rows."""
    rng = random.Random(seed)
    rows = []
    for config_id in range(num_configs):
        config = _config(rng)
        for cap in _caps(rng, caps_per_config):
            rows.append({"id": len(rows), "config": config_id, **config, "cap": cap})
    return {"seed": seed, "models": MODELS, "rows": rows}
