"""Probe: load distinct synthetic expert weights through the real FusedMoE.weight_loader
of sglang-kt (with the real KTEPWrapperMethod around the real GPU quant method) and
report what every GPU weight slot ended up holding.

Usage: python kt_remap_probe.py '<json list of case configs>'   (PYTHONPATH: the
sglang root first). Prints one JSON list (one result per case) on its last line. See test_kt_gpu_expert_remap.py for the
config keys and for which pieces are stand-ins (kt_native_stubs/).
"""

import json
import os
import sys
import tempfile
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "kt_native_stubs"))
import kt_cpu_stubs  # noqa: E402  (must precede sglang)
import torch  # noqa: E402

SENTINEL = -1.0
SHARD_CODE = {"w1": 1000, "w3": 3000, "w2": 2000}


def code(expert, shard, index):
    """A value that names (logical expert, shard, row/column of the full weight)."""
    return float(expert * 10000 + SHARD_CODE[shard] + index)


def full_weight(expert, shard, hidden, inter):
    if shard in ("w1", "w3"):  # [intermediate, hidden], rows are the TP-sharded dim
        rows = torch.arange(inter, dtype=torch.float32)
        return (rows + code(expert, shard, 0)).unsqueeze(1).expand(inter, hidden).clone()
    cols = torch.arange(inter, dtype=torch.float32)  # w2: [hidden, intermediate]
    return (cols + code(expert, shard, 0)).unsqueeze(0).expand(hidden, inter).clone()


class FakeServerArgs(SimpleNamespace):
    """The ServerArgs fields FusedMoE and the KT wrapper read (plain values)."""

    def __getattr__(self, name):  # only reached for missing fields
        raise AttributeError(f"FakeServerArgs has no field {name!r}; add it to the probe")

    def get_hf_config(self):
        return self.hf_config


def main():
    print(json.dumps([run_case(cfg) for cfg in json.loads(sys.argv[1])]))


def run_case(cfg):
    routed = cfg["num_routed_experts"]
    shared = cfg.get("num_fused_shared_experts", 0)
    hidden, inter = cfg.get("hidden_size", 8), cfg.get("intermediate_size", 8)
    tp_size, tp_rank = cfg.get("tp_size", 1), cfg.get("tp_rank", 0)
    ep_size, ep_rank = cfg.get("ep_size", 1), cfg.get("ep_rank", 0)
    num_layers, layer_id = cfg.get("num_layers", 4), cfg.get("layer_id", 1)
    modelopt = cfg.get("modelopt", False)

    # Process-group state: plain rank/size holders read by the real getters
    # (get_moe_tensor_parallel_rank() etc.); no torch.distributed is initialised.
    from sglang.srt.distributed import parallel_state as ps

    ps._TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)
    ps._MOE_TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)
    ps._MOE_EP = SimpleNamespace(world_size=ep_size, rank_in_group=ep_rank)

    from sglang.srt.eplb import expert_location
    from sglang.srt.layers.moe import kt_ep_wrapper
    from sglang.srt.layers.moe.fused_moe_triton import layer as layer_mod
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    freq_file = None
    if cfg["strategy"] == "frequency":
        counts = torch.tensor(cfg["logical_count"], dtype=torch.int64)
        fd, freq_file = tempfile.mkstemp(suffix=".pt")
        os.close(fd)
        torch.save({"logical_count": counts}, freq_file)

    hf_config = SimpleNamespace(
        num_hidden_layers=num_layers,
        n_routed_experts=routed,
        first_k_dense_replace=cfg.get("first_k_dense_replace", 1),
        moe_layer_freq=1,
    )
    server_args = FakeServerArgs(
        hf_config=hf_config,
        kt_weight_path=tempfile.gettempdir(),
        kt_method=cfg.get("kt_method", "BF16"),
        kt_cpuinfer=1,
        kt_threadpool_count=1,
        kt_numa_nodes=None,
        kt_num_gpu_experts=cfg.get("kt_num_gpu_experts"),
        kt_gpu_experts_ratio=None,
        kt_expert_placement_strategy=("uniform" if cfg["strategy"] == "explicit" else cfg["strategy"]),
        kt_max_deferred_experts_per_token=None,
        kt_gpu_prefill_token_threshold=None,
        kt_enable_dynamic_expert_update=False,
        kt_expert_lora_path=None,
        init_expert_location=freq_file or "trivial",
        chunked_prefill_size=64,
        ep_dispatch_algorithm=None,
        enable_deterministic_inference=False,
    )
    set_global_server_args_for_scheduler(server_args)
    kt_cpu_stubs.use_cpu_expert_engine_stand_in(kt_ep_wrapper)
    # Per-process caches of the fork, reset so that one process can run many cases.
    kt_ep_wrapper._KT_GPU_EXPERTS_MASKS = None
    expert_location._global_expert_location_metadata = None

    if cfg["strategy"] != "explicit":
        # The real strategy builds the masks on TP rank 0; the other ranks get them by
        # dist.broadcast. Build them as rank 0; they stay in the fork's mask cache.
        ps._TP = SimpleNamespace(world_size=tp_size, rank_in_group=0)
        masks = kt_ep_wrapper._init_kt_gpu_experts_masks(server_args)
        ps._TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)
    if layer_id == "auto":
        # The first MoE layer whose mask is not a prefix.
        layer_id = next(
            i
            for i in range(hf_config.first_k_dense_replace, num_layers)
            if masks[i].sum() >= 2 and not masks[i, : int(masks[i].sum())].all()
        )

    if cfg["strategy"] == "explicit":
        # The per-session mask cache _init_kt_gpu_experts_masks() returns when set.
        masks = torch.ones(num_layers, routed, dtype=torch.bool)
        masks[layer_id] = False
        masks[layer_id, cfg["gpu_experts"]] = True
        kt_ep_wrapper._KT_GPU_EXPERTS_MASKS = masks

    if cfg["path"] == "trivial":
        # Trivial expert-location metadata (physical id == logical id), built with the
        # real ExpertLocationMetadata; the loader then goes through
        # logical_to_all_physical() and _weight_loader_physical().
        p2l = torch.arange(routed).repeat(num_layers, 1)
        meta = expert_location.ExpertLocationMetadata._init_raw(
            server_args=server_args,
            ep_size=ep_size,
            physical_to_logical_map=p2l,
            logical_to_all_physical_map=p2l.unsqueeze(-1).clone(),
        )
        expert_location.set_global_expert_location_metadata(meta)
    assert (layer_mod.get_global_expert_location_metadata() is None) == (cfg["path"] == "none")

    quant_config = None
    if modelopt:
        from sglang.srt.layers.quantization import modelopt_quant

        # Device query (stand-in listed in the test docstring): NVFP4 needs Blackwell; the weights live on the CPU here.
        modelopt_quant.is_blackwell_supported = lambda: True
        # swizzle_blockscale() ends in `.cuda()` (create_weights uses it for shapes).
        kt_cpu_stubs.keep_cuda_copies_on_cpu()
        quant_config = modelopt_quant.ModelOptFp4Config(is_checkpoint_nvfp4_serialized=True, group_size=16)

    moe = layer_mod.FusedMoE(
        num_experts=routed + shared,
        hidden_size=hidden,
        intermediate_size=inter,
        layer_id=layer_id,
        top_k=2,
        num_fused_shared_experts=shared,
        params_dtype=torch.float32,
        quant_config=quant_config,
        prefix=f"model.layers.{layer_id}.mlp.experts",
    )
    kt = moe.quant_method
    assert type(kt).__name__ == "KTEPWrapperMethod", type(kt)

    params = dict(moe.named_parameters())
    for p in params.values():
        if p.dtype.is_floating_point and p.dtype.itemsize >= 2:
            p.data.fill_(SENTINEL)

    weight_loader = moe.weight_loader
    calls = 0
    for expert in range(routed + shared):
        for shard in ("w1", "w3", "w2"):
            pname = "w2" if shard == "w2" else "w13"
            if modelopt:
                # Per-tensor scales: weight_scale_2 is per GPU slot, input_scale is
                # marked _sglang_require_global_experts and shaped [num_experts, ...].
                weight_loader(
                    params[f"{pname}_weight_scale_2"],
                    torch.tensor(code(expert, shard, 0)),
                    f"model.layers.{layer_id}.mlp.experts.{pname}_weight_scale_2",
                    shard,
                    expert,
                )
                weight_loader(
                    params[f"{pname}_input_scale"],
                    torch.tensor(code(expert, shard, 0)),
                    f"model.layers.{layer_id}.mlp.experts.{pname}_input_scale",
                    shard,
                    expert,
                )
            else:
                weight_loader(
                    params[f"{pname}_weight"],
                    full_weight(expert, shard, hidden, inter),
                    f"model.layers.{layer_id}.mlp.experts.{pname}_weight",
                    shard,
                    expert,
                )
            calls += 1

    result = {
        "num_gpu_experts": kt.num_gpu_experts,
        "gpu_index_to_logical": [int(i) for i in kt.gpu_index_to_logical],
        "mask_len": int(kt.gpu_experts_mask.numel()),
        "num_local_experts": moe.num_local_experts,
        "moe_tp_rank": moe.moe_tp_rank,
        "moe_ep_rank": moe.moe_ep_rank,
        "ktransformers_available": kt_ep_wrapper.KTRANSFORMERS_AVAILABLE,
        "kt_cpu_wrapper": type(kt.wrapper).__name__ if kt.wrapper is not None else None,
        "loader_calls": calls,
        "layer_file": layer_mod.__file__,
    }
    if modelopt:
        ws2 = params["w13_weight_scale_2"].data
        result["w13_weight_scale_2"] = ws2.tolist()
        result["w2_weight_scale_2"] = params["w2_weight_scale_2"].data.tolist()
        result["w13_input_scale"] = params["w13_input_scale"].data.tolist()
        result["w2_input_scale"] = params["w2_input_scale"].data.tolist()
        result["input_scale_shapes"] = [
            list(params["w13_input_scale"].shape),
            list(params["w2_input_scale"].shape),
        ]
        result["require_global"] = [
            bool(getattr(params[n], "_sglang_require_global_experts", False))
            for n in ("w13_input_scale", "w2_input_scale")
        ]
        result["num_slots"] = int(ws2.shape[0])
    else:
        result.update(decode_slots(params["w13_weight"].data, params["w2_weight"].data))
    n = kt.num_gpu_experts
    result["mask_is_prefix"] = bool(kt.gpu_experts_mask[:n].all())
    if freq_file:
        os.unlink(freq_file)
    return result


def decode_part(block, shard, index_dim):
    """(expert, first index) if block is exactly one shard slice of one expert, else a
    description; 'unwritten' if it still holds the sentinel everywhere."""
    if bool((block == SENTINEL).all()):
        return "unwritten"
    first = float(block.flatten()[0])
    expert, rest = divmod(int(first), 10000)
    start = rest - SHARD_CODE[shard]
    if not 0 <= start < 1000:
        return f"foreign:{first}"
    n = block.shape[index_dim]
    idx = torch.arange(n, dtype=torch.float32) + code(expert, shard, start)
    expected = idx.unsqueeze(1) if index_dim == 0 else idx.unsqueeze(0)
    if not bool((block == expected.expand_as(block)).all()):
        return f"mixed:{first}"
    return [expert, start]


def decode_slots(w13, w2):
    half = w13.shape[1] // 2
    slots = []
    for k in range(w13.shape[0]):
        slots.append(
            {
                "w1": decode_part(w13[k, :half], "w1", 0),
                "w3": decode_part(w13[k, half:], "w3", 0),
                "w2": decode_part(w2[k], "w2", 1),
            }
        )
    return {"num_slots": int(w13.shape[0]), "shard_rows": half, "slots": slots}


if __name__ == "__main__":
    main()
