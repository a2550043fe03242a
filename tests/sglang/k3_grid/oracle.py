"""The rows one rank's MegaMoE layer can receive, from sglang's own runtime code.

Runs inside a probe process that imports sglang (stock or patched: none of the
functions used here is touched by the overlay's patches). The resolved
``ServerArgs`` is published into the runtime context (``runtime_context.publish``),
then every decision below is made by the upstream function that makes it at run
time:

- request pool per DP worker: ``KVCacheConfigurator.resolve_max_num_reqs``, taken at
  its largest over the token capacities a GPU could give (the capacity is only known
  after the weights load). Its mamba-state cap can only lower the pool and is left
  out: it needs the profiled mamba memory.
- decode CUDA graph buckets: ``base_cuda_graph_runner.get_batch_sizes_to_capture``
  with the request pool as ``req_to_token_pool.size`` (capture runs every bucket;
  a batch up to the largest bucket is padded to a bucket).
- eager decode batches above the largest bucket: ``get_eager_max_batch_size``
  (pads to attention TP / CP under MLP sync).
- tokens per request of a decode / verify batch: ``spec_utils.resolve_num_tokens_per_req``
  (target verify).
- prefill ceiling: ``runtime_context.max_prefill_buffer_tokens`` (chunk, or the
  dynamic-chunking ceiling under PP); a mixed-chunk batch stays inside it because
  ``PrefillAdder`` takes its decode rows off the chunk. With chunked prefill
  disabled: the largest batch the real ``PrefillAdder`` admits from synthetic
  requests (admission.py). Prefill CUDA graph buckets
  (captured and padded to) are added where a prefill graph backend is on.
- DP padding: ``forward_batch_info.prepare_mlp_sync_batch`` pads each DP rank's
  tokens to a multiple of attention TP (the line is inlined: it needs a
  ForwardBatch and a ModelRunner).
- whether a MoE layer runs on this rank's attention-TP shard: K3's
  ``kimi_k3._shards_moe_rows`` and, for other models, the layer-boundary
  ``factories._ffn_on_rank_rows``; whether an unpadded batch may reach it:
  ``factories._unpadded_possible``; whether a given batch is unpadded:
  ``construction._rows_indivisible_over_attn_tp`` on a batch of that many rows.
- a PD node keeps the other phase's graph backend the operator locked
  (``cuda_graph_hook.apply_cuda_graph_disaggregation_roles``): that phase's
  capture sizes count (read from the resolved ``cuda_graph_config``).
- adaptive speculative decoding: every step's verify width, up to
  ``SpeculativeAlgorithm.resolve_max_speculative_num_draft_tokens``.
- a draft model whose MoE runs through MegaMoE (NEXTN drafts the target's own
  layers; the draft's a2a backend from ``moe.utils.initialize_moe_config``, the
  target's by default): a draft step runs max(top-k, draft tokens) rows per
  request. A dense draft's top-k rows never reach MegaMoE.
- opt-in warmups: ``SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP`` under PP
  (``compile_utils.pp_parallel_deep_gemm_warmup``: batch sizes up to
  n_sms * 64, H200_SMS here) and ``SGLANG_FLASHINFER_AUTOTUNE_EXTEND``
  (``flashinfer_autotune``: an EXTEND dummy at the prefill ceiling, also on a PD
  decode node), taken as running whenever their env var is set.
- a MoE layout the model cannot be built with: ``factories._reject_unsupported_cp_moe``
  (raises; such a server never starts, and the probe counts the row as invalid).

Not run here (needs a GPU or the model's weights): the KV capacity itself, the
mamba state cap, and the draft model's own forward passes (an EAGLE / DSPARK
draft is its own dense model; a NEXTN draft step runs top-k or draft-token rows
per request, no more than the verify width counted here).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

K3_ARCHS = ("KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM")

# Token capacities tried for the request pool: 1k .. 64M tokens.
_TOKEN_CAPACITIES = [1 << k for k in range(10, 27)]

# SMs of the H200 the grid's platform stands for (pp_parallel_deep_gemm_warmup
# reads them from the device).
H200_SMS = 132


def request_pool(server_args, model_config, attn_dp_size: int) -> int:
    """Largest requests per DP worker ``resolve_max_num_reqs`` can give."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    configurator = KVCacheConfigurator.__new__(KVCacheConfigurator)
    configurator.model_config = model_config
    configurator.attn_dp_size = attn_dp_size
    configurator.mambaish_config = None
    return max(configurator.resolve_max_num_reqs(c) for c in _TOKEN_CAPACITIES)


def _batch(rows: int):
    return SimpleNamespace(input_ids=torch.empty(rows, dtype=torch.int32))


def moe_rows(num_tokens: int, step: int, *, sharded: bool, unpadded: bool, a: int) -> int:
    """Largest rows one rank's MoE runs for a batch of at most ``num_tokens``
    rows (in multiples of ``step``) on its DP rank."""
    from sglang.srt.layers.layer_boundary.construction import (
        _rows_indivisible_over_attn_tp,
    )

    if num_tokens <= 0:
        return 0
    if not sharded:
        return num_tokens
    best = -(-num_tokens // a)
    if unpadded:
        # The largest batch whose rows do not divide over attention TP stays whole.
        for m in range(num_tokens, max(num_tokens - step * a, 0), -step):
            if _rows_indivisible_over_attn_tp(_batch(m), a):
                best = max(best, m)
                break
    return best


def _pp_warmup_batch_sizes(a: int, mlp_sync: bool) -> list[int]:
    """``pp_parallel_deep_gemm_warmup``'s batch sizes (its sweep, inlined: it
    needs a runner and a device)."""
    import math

    from sglang.srt.layers.cp.padding import get_cp_padding_align_size
    from sglang.srt.utils.common import ceil_align

    block_m, n_sms = 64, H200_SMS
    cp = max(get_cp_padding_align_size(), 1)
    align = math.lcm(cp, a) if mlp_sync and a > 1 else cp
    sweep = (1, 2 * block_m, max(n_sms // 8, 2) * block_m, max(n_sms // 4, 4) * block_m, n_sms * block_m)
    return sorted({ceil_align(bs, align) for bs in sweep})


def oracle(server_args, arch: str, draft_moe: bool = False) -> dict:
    """{"prefill": rows or None, "decode": rows or None, "pool": ..., ...}"""
    from admission import unchunked_prefill_tokens
    from sglang.srt.arg_groups.overrides import model_config_of, resolved_view
    from sglang.srt.environ import envs
    from sglang.srt.layers.layer_boundary import factories
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import (
        get_batch_sizes_to_capture,
    )
    from sglang.srt.runtime_context import (
        get_exec,
        get_flags,
        get_parallel,
        get_schedule,
        max_prefill_buffer_tokens,
        publish,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_utils import resolve_num_tokens_per_req
    from sglang.srt.utils.common import (
        ceil_align,
        get_eager_max_batch_size,
        require_mlp_sync,
    )

    publish(server_args, role="test")
    initialize_moe_config()
    cfg = resolved_view(server_args)
    model_config = model_config_of(server_args)
    parallel = get_parallel()
    a = parallel.attn_tp_size
    group = SimpleNamespace(world_size=a)
    with parallel.override(attn_tp_group=group):
        if arch in K3_ARCHS:
            from sglang.srt.models.kimi_k3 import _shards_moe_rows

            sharded = _shards_moe_rows()
        else:
            sharded = factories._ffn_on_rank_rows(True, None) and a > 1
        # A MoE layout the layer-boundary code cannot build fails model
        # construction: such a server never starts.
        factories._reject_unsupported_cp_moe(
            factories._ffn_on_rank_rows(True, None),
            parallel.attn_cp_size > 1 and parallel.enable_prefill_cp,
        )
        unpadded = factories._unpadded_possible() if sharded else False
        mlp_sync = require_mlp_sync()
        dp = parallel.attn_dp_size
        pool = request_pool(server_args, model_config, dp)

        result = {"pool": pool, "attn_tp": a, "sharded": sharded, "unpadded": unpadded}
        mode = cfg.disaggregation_mode

        # Prefill.
        graphs = get_exec().graph.cuda_graph_config
        prefill_cg, decode_cg = graphs.prefill, graphs.decode
        spec = SpeculativeAlgorithm.from_string(cfg.speculative_algorithm)
        autotune_extend = envs.SGLANG_FLASHINFER_AUTOTUNE_EXTEND.get() and (
            not spec.is_speculative() or mode == "prefill"
        )
        pp_warmup = envs.SGLANG_PP_PARALLEL_DEEPGEMM_WARMUP.get() and parallel.pp_size > 1 and not spec.is_speculative()
        tokens = 0
        if mode != "decode":
            if not cfg.chunked_prefill_size or cfg.chunked_prefill_size <= 0:
                tokens = unchunked_prefill_tokens(model_config, cfg.page_size, pool)
            else:
                tokens = max_prefill_buffer_tokens()
        if prefill_cg.backend != Backend.DISABLED and prefill_cg.bs:
            # Captured on every node that keeps the backend (a PD decode node
            # keeps one the operator locked).
            captured = [n for n in prefill_cg.bs if n <= pool * model_config.context_len]
            if captured:
                tokens = max(tokens, max(captured))
        if autotune_extend:
            tokens = max(tokens, max_prefill_buffer_tokens() or get_schedule().max_prefill_tokens)
        if pp_warmup and mode != "decode":
            tokens = max(tokens, max(_pp_warmup_batch_sizes(a, mlp_sync)))
        if tokens == 0:
            result["prefill"] = None
        else:
            if mlp_sync:
                tokens = ceil_align(tokens, a)
            result["prefill_tokens"] = tokens
            result["prefill"] = moe_rows(tokens, 1, sharded=sharded, unpadded=unpadded, a=a)

        # Decode / verify.
        if mode == "prefill" and decode_cg.backend == Backend.DISABLED and not pp_warmup:
            result["decode"] = None
            return result
        per_req = 1
        if spec.is_speculative():
            per_req = resolve_num_tokens_per_req(phase="target_verify", spec_algorithm=spec, is_draft_worker=False)
            widest = spec.resolve_max_speculative_num_draft_tokens(server_args)
            if cfg.speculative_adaptive and widest:
                # A verify graph per adaptive step, each its own width.
                per_req = max(per_req, widest)
            # The draft's a2a backend (initialize_moe_config: the target's unless
            # --speculative-moe-a2a-backend sets one).
            if draft_moe and get_flags().moe.speculative_a2a_backend.is_megamoe():
                per_req = max(per_req, cfg.speculative_eagle_topk or 1, cfg.speculative_num_draft_tokens or 1)
        bs = 0 if mode == "prefill" else get_eager_max_batch_size(pool)
        if decode_cg.backend != Backend.DISABLED:
            runner = SimpleNamespace(
                req_to_token_pool=SimpleNamespace(size=pool),
                server_args=server_args,
            )
            capture_bs, _ = get_batch_sizes_to_capture(runner, per_req)
            result["max_graph_bs"] = max(capture_bs)
            bs = max(bs, max(capture_bs))
        tokens = bs * per_req
        if pp_warmup and mode != "prefill":
            tokens = max(tokens, max(_pp_warmup_batch_sizes(a, mlp_sync)))
        if mlp_sync:
            tokens = ceil_align(tokens, a)
        result["decode_bs"] = bs
        result["tokens_per_req"] = per_req
        result["decode"] = moe_rows(tokens, per_req, sharded=sharded, unpadded=unpadded, a=a)
    return result


def required_rows(result: dict) -> int:
    return max(r for r in (result.get("prefill"), result.get("decode"), 0) if r is not None)
