"""The real sglang-kt FusedMoE layer, built on a CPU-only machine: one case config -> the layer
(with the real KTEPWrapperMethod around the real GPU quant method, or without KT as the
reference), every expert loaded with distinct synthetic weights through its real weight_loader,
and a description of what every GPU weight slot then holds (run_case). The test modules
gpu_expert_remap.py (its cases show the config keys, its docstring the stand-ins), expert_maps.py,
quant_grid.py and eplb_rebalance.py build their layers with it, in the pytest process their
parent runs with the stock or the patched package first on PYTHONPATH. Importing this module
has no side effects beyond torch: a test calls install_stand_ins() before sglang is imported.
"""

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

STUBS = Path(__file__).resolve().parent / "kt_native_stubs"
SENTINEL = -1.0
SHARD_CODE = {"w1": 1000, "w3": 3000, "w2": 2000}
# NVFP4 per-tensor scales that name their expert exactly in float32 (see nvfp4_* below).
NVFP4_W2_INPUT_SHIFT = 40
NVFP4_W2_WS2_OFFSET = 1000


def code(expert, shard, index):
    """A value that names (logical expert, shard, row/column of the full weight)."""
    return float(expert * 10000 + SHARD_CODE[shard] + index)


def full_weight(expert, shard, hidden, inter):
    if shard in ("w1", "w3"):  # [intermediate, hidden], rows are the TP-sharded dim
        rows = torch.arange(inter, dtype=torch.float32)
        return (rows + code(expert, shard, 0)).unsqueeze(1).expand(inter, hidden).clone()
    cols = torch.arange(inter, dtype=torch.float32)  # w2: [hidden, intermediate]
    return (cols + code(expert, shard, 0)).unsqueeze(0).expand(hidden, inter).clone()


def nvfp4_input_scale(expert, shard):
    """A power of two per expert (w1 and w3 alike, as in real checkpoints)."""
    return 2.0 ** -(expert + 1 + (NVFP4_W2_INPUT_SHIFT if shard == "w2" else 0))


def nvfp4_weight_scale_2(expert, shard):
    return float(expert + 1 + (NVFP4_W2_WS2_OFFSET if shard == "w2" else 0))


class FakeServerArgs(SimpleNamespace):
    """The ServerArgs fields FusedMoE and the KT wrapper read (plain values)."""

    def __getattr__(self, name):  # only reached for missing fields
        raise AttributeError(f"FakeServerArgs has no field {name!r}; add it to kt_layer.make_server_args")

    def get_hf_config(self):
        return self.hf_config


def install_stand_ins():
    """kt_native_stubs/'s stand-ins for the KT natives, installed before sglang is imported."""
    sys.path.insert(0, str(STUBS))
    import kt_cpu_stubs

    return kt_cpu_stubs


def run_cases(cases):
    """Every case built and loaded once, by name."""
    install_stand_ins()
    return {name: run_case(cfg) for name, cfg in cases.items()}


def run_case(cfg):
    """Build one KT FusedMoE layer as the config says (`kt: false`: the same layer
    without KT, as the reference), load every expert, describe it."""
    if "server_args" in cfg:
        return check_server_args(cfg["server_args"])
    routed = cfg["num_routed_experts"]
    num_layers = cfg.get("num_layers", 4)
    first_moe_layer = cfg.get("first_k_dense_replace", 1)
    set_process_groups(cfg.get("tp_size", 1), cfg.get("tp_rank", 0), cfg.get("ep_size", 1), cfg.get("ep_rank", 0))
    freq_file = write_frequency_file(cfg.get("logical_count"))
    try:
        server_args = make_server_args(cfg, num_layers, first_moe_layer, freq_file)
        install_server_args(server_args)
        if not cfg.get("kt", True):
            masks = None
        elif cfg["strategy"] == "explicit":
            masks = install_explicit_masks(num_layers, routed, cfg["gpu_experts"])
        else:
            masks = strategy_masks(server_args, cfg.get("tp_size", 1), cfg.get("tp_rank", 0))
        layer_id = resolve_layer_id(cfg.get("layer_id", 1), masks, first_moe_layer)
        physical_to_logical = None
        if cfg["path"] == "trivial":
            install_trivial_metadata(server_args, routed, num_layers, cfg.get("ep_size", 1))
        elif cfg["path"] in MAP_PATHS:
            physical_to_logical = install_mapped_metadata(server_args, cfg, num_layers, layer_id)
        try:
            moe = build_moe(cfg, layer_id)
        except ValueError as exc:  # a combination the layer refuses at startup
            return {"refused": str(exc)}
        fill_sentinel(moe, float("nan") if cfg.get("modelopt") else SENTINEL)
        loader = cfg.get("loader", "per_expert")
        if loader != "per_expert":
            result = load_all_experts_at_once(moe, cfg, layer_id, loader)
            if "refused" not in result:
                result["physical_to_logical"] = physical_to_logical
            return result
        calls = load_experts(moe, cfg, layer_id)
        result = describe(moe, calls) if masks is not None else {"loader_calls": calls}
        try:
            if cfg.get("modelopt"):
                result.update(nvfp4_scales(moe))
            elif cfg.get("prefill_threshold"):
                moe.quant_method.process_weights_after_loading(moe)
        except ValueError as exc:  # refused once the layer is post-processed, at startup
            return {"refused": str(exc)}
        if not cfg.get("modelopt"):
            result.update(decode_slots(moe.w13_weight.data, moe.w2_weight.data))
        if cfg.get("dynamic_update"):
            result.update(dynamic_update(moe, cfg))
        if cfg.get("full_prefill"):
            result.update(full_gpu_prefill(moe))
        if cfg.get("route"):
            result.update(route(moe, layer_id))
        result["physical_to_logical"] = physical_to_logical
    finally:
        if freq_file:
            os.unlink(freq_file)
    return result


def check_server_args(fields):
    """The real ServerArgs with these fields, through its EPLB/dispatch handler
    (model_path "dummy" returns from __post_init__ before the handlers run)."""
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path="dummy", **fields)
    try:
        server_args._handle_eplb_and_dispatch()
    except ValueError as exc:
        return {"refused": str(exc)}
    return {"accepted": True, "ep_dispatch_algorithm": server_args.ep_dispatch_algorithm}


def set_process_groups(tp_size, tp_rank, ep_size, ep_rank):
    """Plain rank/size holders read by the real getters (get_moe_tensor_parallel_rank()
    etc.); no torch.distributed is initialised."""
    from sglang.srt.distributed import parallel_state as ps

    ps._TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)
    ps._MOE_TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)
    ps._MOE_EP = SimpleNamespace(world_size=ep_size, rank_in_group=ep_rank)


def write_frequency_file(logical_count):
    """The `logical_count` .pt file of the `frequency` strategy, or None."""
    if logical_count is None:
        return None
    fd, path = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    torch.save({"logical_count": torch.tensor(logical_count, dtype=torch.int64)}, path)
    return path


def make_server_args(cfg, num_layers, first_moe_layer, freq_file):
    hf_config = SimpleNamespace(
        num_hidden_layers=num_layers,
        n_routed_experts=cfg["num_routed_experts"],
        first_k_dense_replace=first_moe_layer,
        moe_layer_freq=1,
    )
    return FakeServerArgs(
        hf_config=hf_config,
        kt_weight_path=tempfile.gettempdir() if cfg.get("kt", True) else None,
        kt_method=cfg.get("kt_method", "BF16"),
        kt_cpuinfer=1,
        kt_threadpool_count=1,
        kt_numa_nodes=None,
        kt_num_gpu_experts=cfg.get("kt_num_gpu_experts"),
        kt_gpu_experts_ratio=None,
        kt_expert_placement_strategy=("uniform" if cfg["strategy"] == "explicit" else cfg["strategy"]),
        kt_max_deferred_experts_per_token=None,
        kt_gpu_prefill_token_threshold=cfg.get("prefill_threshold"),
        kt_enable_dynamic_expert_update=cfg.get("dynamic_update", False) or cfg.get("dynamic_flag", False),
        enable_eplb=cfg.get("enable_eplb", False),
        kt_expert_lora_path=None,
        init_expert_location=freq_file or "trivial",
        chunked_prefill_size=64,
        ep_dispatch_algorithm=None,
        # ExpertLocationMetadata.init_by_mapping / init_by_eplb read these.
        device="cpu",
        ep_size=cfg.get("ep_size", 1),
        nnodes=1,
        ep_num_redundant_experts=cfg.get("redundant", 0),
        eplb_algorithm="auto",
        enable_deterministic_inference=False,
        # initialize_moe_config() reads these; the runner backend picks the NVFP4 branch.
        moe_a2a_backend="none",
        moe_runner_backend=cfg.get("moe_runner_backend", "auto"),
        speculative_moe_runner_backend=None,
        speculative_moe_a2a_backend=None,
        deepep_mode="auto",
        deepep_config=None,
        enable_two_batch_overlap=False,
        enable_single_batch_overlap=False,
        tbo_token_distribution_threshold=0.48,
        disable_flashinfer_cutlass_moe_fp4_allgather=True,
        flashinfer_mxfp4_moe_precision="default",
        quantization="modelopt_fp4" if cfg.get("modelopt") else None,
    )


def install_server_args(server_args):
    """What the scheduler does before building the model, plus the resets that let one process build many layers."""
    import kt_cpu_stubs
    from sglang.srt.eplb import expert_location
    from sglang.srt.layers.moe import kt_ep_wrapper
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    initialize_moe_config(server_args)
    set_global_server_args_for_scheduler(server_args)
    kt_cpu_stubs.use_cpu_expert_engine_stand_in(kt_ep_wrapper)
    # Per-process caches of the fork, reset so that one process can run many cases.
    kt_ep_wrapper._KT_GPU_EXPERTS_MASKS = None
    expert_location._global_expert_location_metadata = None


def explicit_masks(num_layers, num_experts, gpu_experts):
    """Every layer's mask selects `gpu_experts` (a case builds one layer of them)."""
    masks = torch.zeros(num_layers, num_experts, dtype=torch.bool)
    masks[:, gpu_experts] = True
    return masks


def install_explicit_masks(num_layers, num_experts, gpu_experts):
    """Put explicit masks in the fork's per-session mask cache, which
    _init_kt_gpu_experts_masks() returns when set."""
    from sglang.srt.layers.moe import kt_ep_wrapper

    masks = explicit_masks(num_layers, num_experts, gpu_experts)
    kt_ep_wrapper._KT_GPU_EXPERTS_MASKS = masks
    return masks


def strategy_masks(server_args, tp_size, tp_rank):
    """The fork's strategy builds the masks on TP rank 0 and broadcasts them to the
    other ranks: build them as rank 0; they stay in the fork's mask cache."""
    from sglang.srt.layers.moe import kt_ep_wrapper

    set_tp_rank(tp_size, 0)
    masks = kt_ep_wrapper._init_kt_gpu_experts_masks(server_args)
    set_tp_rank(tp_size, tp_rank)
    return masks


def set_tp_rank(tp_size, tp_rank):
    from sglang.srt.distributed import parallel_state as ps

    ps._TP = SimpleNamespace(world_size=tp_size, rank_in_group=tp_rank)


def is_prefix(mask):
    return bool(mask[: int(mask.sum())].all())


def resolve_layer_id(layer_id, masks, first_moe_layer):
    """A layer number, or "auto": the first MoE layer whose mask is not a prefix."""
    if layer_id != "auto":
        return layer_id
    for i in range(first_moe_layer, len(masks)):
        if masks[i].sum() >= 2 and not is_prefix(masks[i]):
            return i
    raise ValueError(
        f"layer_id='auto': no MoE layer {first_moe_layer}..{len(masks) - 1} has a "
        "non-prefix GPU-expert mask; give the case a layer number"
    )


def install_trivial_metadata(server_args, routed, num_layers, ep_size):
    """Trivial expert-location metadata (physical id == logical id), built with the real
    ExpertLocationMetadata; the loader then goes through logical_to_all_physical() and
    _weight_loader_physical()."""
    from sglang.srt.eplb import expert_location

    p2l = torch.arange(routed).repeat(num_layers, 1)
    meta = expert_location.ExpertLocationMetadata._init_raw(
        server_args=server_args,
        ep_size=ep_size,
        physical_to_logical_map=p2l,
        logical_to_all_physical_map=p2l.unsqueeze(-1).clone(),
    )
    expert_location.set_global_expert_location_metadata(meta)


MAP_PATHS = ("mapfile", "eplbmap")
EPLB_COUNTS_SEED = 4321


def install_mapped_metadata(server_args, cfg, num_layers, layer_id):
    """Metadata from an --init-expert-location file holding a physical_to_logical_map,
    read by the real compute_initial_expert_location_metadata. `mapfile`: the
    case's map (physical expert p of every layer holds logical expert map[p]);
    `eplbmap`: the map the real EPLB algorithm (ExpertLocationMetadata.init_by_eplb)
    makes from seeded expert counts, as an EPLB run dumps it. The model-registry
    lookup (which model class, how many layers and experts) answers from the case
    (test plumbing). Returns the map of the layer under test."""
    from sglang.srt.eplb import expert_location

    routed = cfg["num_routed_experts"]
    expert_location.ModelConfigForExpertLocation.from_model_config = staticmethod(
        lambda model_config: expert_location.ModelConfigForExpertLocation(
            num_layers=num_layers, num_logical_experts=routed
        )
    )
    if cfg["path"] == "mapfile":
        p2l = torch.tensor(cfg["physical_to_logical"]).repeat(num_layers, 1)
    else:
        gen = torch.Generator().manual_seed(EPLB_COUNTS_SEED)
        counts = torch.randint(0, 1000, (1, num_layers, routed), generator=gen)
        p2l = expert_location.ExpertLocationMetadata.init_by_eplb(server_args, None, counts).physical_to_logical_map
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"physical_to_logical_map": p2l.tolist()}, f)
    server_args.init_expert_location = path
    try:
        meta = expert_location.compute_initial_expert_location_metadata(
            server_args, None, moe_ep_rank=cfg.get("ep_rank", 0)
        )
    finally:
        os.unlink(path)
    expert_location.set_global_expert_location_metadata(meta)
    return meta.physical_to_logical_map_cpu[layer_id].tolist()


def shared_full_context(moe):
    """The layer's real SharedFullContext with its full-GPU layer built; its host buffers and the
    KT transfer into it are not (they need the CPU-expert engine)."""
    from sglang.srt.layers.moe import kt_ep_wrapper

    method = moe.quant_method
    return kt_ep_wrapper.SharedFullContext(
        layer=moe,
        init_args=method._full_init_args,
        global_num_experts=method.global_num_experts,
        moe_runner_config=moe.moe_runner_config,
        defer_cpu_buffers=True,
    )


def dynamic_update(moe, cfg):
    """One --kt-enable-dynamic-expert-update step as a prefill on the full-GPU path
    runs it: the real SharedFullContext (its full layer built, its host buffers and
    the KT transfer into it not: they need the CPU-expert engine; the full layer is
    filled from the checkpoint instead) and the real _update_gpu_experts_from_batch
    with a batch whose top experts are `cfg["batch_experts"]`. Reports what each GPU
    slot then holds, the KT tables and the CPU engine's mask, or the error."""
    method = moe.quant_method
    ctx = shared_full_context(moe)
    hidden, inter = cfg.get("hidden_size", 8), cfg.get("intermediate_size", 8)
    if not cfg.get("modelopt"):
        full = ctx.gpu_layer
        for e in range(method.global_num_experts):
            full.w13_weight.data[e] = torch.cat([full_weight(e, s, hidden, inter) for s in ("w1", "w3")])
            full.w2_weight.data[e] = full_weight(e, "w2", hidden, inter)
    top = cfg["batch_experts"]
    topk_ids = torch.tensor([top[: len(top) // 2] * 3, top[len(top) // 2 :] * 3]).view(-1, 2)
    dispatch_output = SimpleNamespace(topk_output=SimpleNamespace(topk_ids=topk_ids))
    try:
        method._update_gpu_experts_from_batch(layer=moe, ctx=ctx, dispatch_output=dispatch_output)
    except Exception as exc:  # noqa: BLE001  (reported: the stock crash is the finding)
        return {"update_error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    out = {
        "updated_gpu_index_to_logical": [int(i) for i in method.gpu_index_to_logical],
        "updated_mask": [int(i) for i in method.gpu_experts_mask.nonzero().flatten()],
        "updated_logical_to_gpu_index": [int(i) for i in method.logical_to_gpu_index],
        "updated_cpu_engine_mask": [int(i) for i in method.wrapper.gpu_experts_mask.nonzero().flatten()],
    }
    if not cfg.get("modelopt"):
        out["updated_slots"] = decode_slots(moe.w13_weight.data, moe.w2_weight.data)["slots"]
    return out


def full_gpu_prefill(moe):
    """The full-GPU prefill path (--kt-gpu-prefill-token-threshold) of an NVFP4 layer:
    the real SharedFullContext (its host buffers and the KT transfer not built: they
    need the CPU-expert engine), every float parameter of its full layer marked
    unwritten (NaN), then the real process_weights_after_loading that apply() runs on
    it. Reports the parameters its load transfers (ctx.weight_names), those it
    transfers none of, and, per expert, the scales its g1/g2_alphas and input-scale
    quant are made of ("nan": an unwritten one)."""
    ctx = shared_full_context(moe)
    full = ctx.gpu_layer
    fill_sentinel(full, float("nan"))
    transferred = list(ctx.weight_names)
    scale_names = sorted(n for n, p in full.named_parameters() if n not in transferred and p.dtype == torch.float32)
    ctx.gpu_method.process_weights_after_loading(full)
    out = {"full_transferred": transferred, "full_not_transferred": scale_names}
    for gemm, shard, alphas in (("w13", "w1", full.g1_alphas), ("w2", "w2", full.g2_alphas)):
        quant = getattr(full, f"{gemm}_input_scale_quant").data
        out[f"full_{gemm}_experts"] = [
            decode_nvfp4_slot(float(alphas[k]), float(quant[k] if quant.numel() > 1 else quant), shard)
            for k in range(full.num_experts)
        ]
    return out


def route(moe, layer_id):
    """Where routing sends every logical expert of the layer on this rank: the physical
    expert the real static dispatch map picks (compute_logical_to_rank_dispatch_physical_map;
    --init-expert-location sets --ep-dispatch-algorithm static), then the GPU slot the
    real KTEPWrapperMethod.apply computes for it (mask_and_remap_expert_ids, run
    eagerly: compiled on a GPU, an id past the mask is a device-side assert there).
    Also the expert count the CPU-expert engine is built with, next to the mask length."""
    from sglang.srt.eplb import expert_location
    from sglang.srt.layers.moe import kt_ep_wrapper
    from sglang.srt.server_args import get_global_server_args

    meta = expert_location.get_global_expert_location_metadata()
    server_args = get_global_server_args()
    dispatch = expert_location.compute_logical_to_rank_dispatch_physical_map(
        server_args=server_args,
        logical_to_all_physical_map=meta.logical_to_all_physical_map_cpu,
        ep_size=server_args.ep_size,
        num_physical_experts=meta.num_physical_experts,
        ep_rank=moe.moe_ep_rank,
    )[layer_id]
    method = moe.quant_method
    remap = kt_ep_wrapper.mask_and_remap_expert_ids._torchdynamo_orig_callable
    routes = []
    for physical in dispatch.tolist():
        local = physical - moe.moe_ep_rank * moe.num_local_experts
        try:
            slot = int(remap(torch.tensor([[local]]), method.gpu_experts_mask, method.logical_to_gpu_index))
        except IndexError as exc:
            slot = f"{type(exc).__name__}: {exc}"
        routes.append({"physical": physical, "slot": slot})
    return {
        "routes": routes,
        "cpu_engine_num_experts": None if method.wrapper is None else method.wrapper.num_experts,
    }


def nvfp4_quant_config():
    """The real ModelOptFp4Config (the checkpoint format NVFP4 serving loads)."""
    import kt_cpu_stubs
    from sglang.srt.layers.quantization import modelopt_quant

    # Device query (stand-in listed in the test docstring): NVFP4 needs Blackwell.
    modelopt_quant.is_blackwell_supported = lambda: True
    # swizzle_blockscale() ends in `.cuda()` (create_weights and process_weights_after_loading).
    kt_cpu_stubs.keep_cuda_copies_on_cpu()
    return modelopt_quant.ModelOptFp4Config(is_checkpoint_nvfp4_serialized=True, group_size=16)


def quant_config(cfg):
    if cfg.get("modelopt"):
        return nvfp4_quant_config()
    if cfg.get("loader") in ("mxfp4", "gpt_oss_mxfp4"):
        import kt_cpu_stubs
        from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

        # gpt-oss moves every checkpoint tensor with `.cuda()` before narrowing it.
        kt_cpu_stubs.keep_cuda_copies_on_cpu()

        return Mxfp4Config(is_checkpoint_mxfp4_serialized=True)  # gpt-oss checkpoints
    return None


def build_moe(cfg, layer_id):
    from sglang.srt.layers.moe.fused_moe_triton import layer as layer_mod

    assert (layer_mod.get_global_expert_location_metadata() is None) == (cfg["path"] == "none")
    shared = cfg.get("num_fused_shared_experts", 0)
    moe = layer_mod.FusedMoE(
        # As the models build it: routed + --ep-num-redundant-experts (+ fused shared).
        num_experts=cfg["num_routed_experts"] + cfg.get("redundant", 0) + shared,
        hidden_size=cfg.get("hidden_size", 8),
        intermediate_size=cfg.get("intermediate_size", 8),
        layer_id=layer_id,
        top_k=2,
        num_fused_shared_experts=shared,
        params_dtype=torch.float32,
        quant_config=quant_config(cfg),
        prefix=f"model.layers.{layer_id}.mlp.experts",
        use_weight_loader_fused=cfg.get("loader") == "fused",
    )
    plain = "ModelOptNvFp4FusedMoEMethod" if cfg.get("modelopt") else "UnquantizedFusedMoEMethod"
    if cfg.get("loader") == "gpt_oss_mxfp4":
        plain = "Mxfp4MoEMethod"
    expected = "KTEPWrapperMethod" if cfg.get("kt", True) else plain
    assert type(moe.quant_method).__name__ == expected, type(moe.quant_method)
    return moe


def fill_sentinel(moe, value):
    """Mark every float parameter as unwritten (the float8 block scales stay as created)."""
    for p in moe.parameters():
        if p.dtype.is_floating_point and p.dtype.itemsize >= 2:
            p.data.fill_(value)


def load_experts(moe, cfg, layer_id):
    """Every shard of every expert through moe.weight_loader; returns the call count."""
    params = dict(moe.named_parameters())
    prefix = f"model.layers.{layer_id}.mlp.experts"
    hidden, inter = cfg.get("hidden_size", 8), cfg.get("intermediate_size", 8)
    calls = 0
    for expert in range(moe.num_experts - cfg.get("redundant", 0)):  # the checkpoint's experts
        for shard in ("w1", "w3", "w2"):
            pname = "w2" if shard == "w2" else "w13"
            if cfg.get("modelopt"):
                # weight_scale_2 has a row per GPU slot; input_scale is marked
                # _sglang_require_global_experts and has a row per global expert.
                for name, value in (
                    ("weight_scale_2", nvfp4_weight_scale_2(expert, shard)),
                    ("input_scale", nvfp4_input_scale(expert, shard)),
                ):
                    full = f"{pname}_{name}"
                    moe.weight_loader(params[full], torch.tensor(value), f"{prefix}.{full}", shard, expert)
            else:
                weight = full_weight(expert, shard, hidden, inter)
                moe.weight_loader(params[f"{pname}_weight"], weight, f"{prefix}.{pname}_weight", shard, expert)
            calls += 1
    return calls


def load_all_experts_at_once(moe, cfg, layer_id, loader):
    """Load w13/w2 as one tensor of all local experts, as gpt-oss does: `fused`
    through weight_loader_fused (BF16/FP8 checkpoints), `mxfp4` through
    weight_loader(expert_id=None) with the MXFP4 config (its static branch). A
    RuntimeError from the loader is reported, not raised."""
    prefix = f"model.layers.{layer_id}.mlp.experts"
    result = describe(moe, 2) if cfg.get("kt", True) else {"num_local_experts": moe.num_local_experts}
    if loader == "gpt_oss_mxfp4":
        result.update(load_gpt_oss_mxfp4(moe, cfg, prefix))
        if cfg.get("prefill_threshold"):
            try:
                post_process_mxfp4(moe)
            except ValueError as exc:  # refused at startup
                return {"refused": str(exc)}
        if cfg.get("dynamic_update"):
            result.update(dynamic_update_mxfp4(moe, cfg))
        return result
    try:
        for pname in ("w13", "w2"):
            param = getattr(moe, f"{pname}_weight")
            name = f"{prefix}.{pname}_weight"
            if loader == "fused":
                moe.weight_loader_fused(param, fused_weight(moe, cfg, pname), name, pname)
            else:
                moe.weight_loader(param, mxfp4_blocks(moe, param), name, None, None)
    except RuntimeError as exc:
        result["error"] = str(exc).splitlines()[0]
        return result
    if loader == "fused":
        result.update(decode_slots(moe.w13_weight.data, moe.w2_weight.data))
    else:
        result["num_slots"] = int(moe.w13_weight.shape[0])
        result["slot_experts"] = [
            [mxfp4_expert(getattr(moe, f"{p}_weight").data[k]) for p in ("w13", "w2")]
            for k in range(moe.w13_weight.shape[0])
        ]
    return result


GPT_OSS_MXFP4 = {  # checkpoint name -> (layer parameter, shape of one expert's tensor from (hidden, inter))
    "gate_up_proj_blocks": ("w13_weight", lambda h, i: (2 * i, h // 32, 16)),
    "down_proj_blocks": ("w2_weight", lambda h, i: (h, i // 32, 16)),
    "gate_up_proj_scales": ("w13_weight_scale", lambda h, i: (2 * i, h // 32)),
    "down_proj_scales": ("w2_weight_scale", lambda h, i: (h, i // 32)),
    "gate_up_proj_bias": ("w13_weight_bias", lambda h, i: (2 * i,)),
    "down_proj_bias": ("w2_weight_bias", lambda h, i: (h,)),
}


def load_gpt_oss_mxfp4(moe, cfg, prefix):
    """The layer's MXFP4 expert tensors as a gpt-oss checkpoint holds them (every
    expert, logical order; every byte and bias value of expert e is e + 1) through the
    real GptOssForCausalLM._load_mxfp4_experts_weights, which cuts them for this rank
    and calls weight_loader(expert_id=None). Reports, per slot, the expert each tensor
    of the slot holds ("unwritten" / "mixed:..." otherwise)."""
    from sglang.srt.models.gpt_oss import GptOssForCausalLM

    experts = cfg["num_routed_experts"]
    hidden, inter = cfg.get("hidden_size", 8), cfg.get("intermediate_size", 8)
    weights = []
    for name, (_, shape) in GPT_OSS_MXFP4.items():
        dtype = torch.bfloat16 if name.endswith("bias") else torch.uint8
        one = shape(hidden, inter)
        value = (torch.arange(experts) + 1).to(dtype).view(-1, *[1] * len(one))
        weights.append((f"{prefix}.{name}", value.expand(experts, *one).clone()))
    params = [(f"{prefix}.{name}", p) for name, p in moe.named_parameters()]
    model = SimpleNamespace(  # what the loader reads of the model
        named_parameters=lambda: iter(params),
        config=SimpleNamespace(intermediate_size=inter, num_local_experts=experts),
    )
    try:
        GptOssForCausalLM._load_mxfp4_experts_weights(model, weights)
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0]}
    names = [param for param, _ in GPT_OSS_MXFP4.values()]
    rows = getattr(moe, names[0]).shape[0]
    return {
        "num_slots": rows,
        "slot_tensors": [{n: written_expert(getattr(moe, n).data[k]) for n in names} for k in range(rows)],
    }


def post_process_mxfp4(moe):
    """KTEPWrapperMethod.process_weights_after_loading, with Mxfp4MoEMethod's own
    (a triton or flashinfer swizzle: GPU kernels, not the code under test) replaced by
    a pass-through that keeps w13_weight, as its flashinfer branches do."""
    method = moe.quant_method
    own = method.gpu_method.process_weights_after_loading
    method.gpu_method.process_weights_after_loading = lambda layer: None
    try:
        method.process_weights_after_loading(moe)
    finally:
        method.gpu_method.process_weights_after_loading = own


def dynamic_update_mxfp4(moe, cfg):
    """One dynamic-update step (as dynamic_update()) on a gpt-oss MXFP4 layer: the real
    SharedFullContext, its full layer filled as its load fills it (the tensors of
    ctx.weight_names take every expert's checkpoint values, expert e: e + 1; the others
    stay as created), then the real _update_gpu_experts_from_batch. Reports what the
    context loads and what each GPU slot's tensors then hold."""
    method = moe.quant_method
    ctx = shared_full_context(moe)
    loaded = list(ctx.weight_names)
    for name in loaded:
        t = getattr(ctx.gpu_layer, name).data
        t.copy_((torch.arange(t.shape[0]) + 1).to(t.dtype).view(-1, *[1] * (t.dim() - 1)).expand_as(t))
    top = cfg["batch_experts"]
    topk_ids = torch.tensor([top[: len(top) // 2] * 3, top[len(top) // 2 :] * 3]).view(-1, 2)
    dispatch_output = SimpleNamespace(topk_output=SimpleNamespace(topk_ids=topk_ids))
    method._update_gpu_experts_from_batch(layer=moe, ctx=ctx, dispatch_output=dispatch_output)
    names = [param for param, _ in GPT_OSS_MXFP4.values()]
    return {
        "full_loaded": loaded,
        "updated_gpu_index_to_logical": [int(i) for i in method.gpu_index_to_logical],
        "updated_slot_tensors": [
            {n: written_expert(getattr(moe, n).data[k]) for n in names} for k in range(method.num_gpu_experts)
        ],
    }


def written_expert(row):
    """The expert a slot's tensor holds where the checkpoint wrote it (padding stays 0)."""
    values = [v for v in row.float().unique().tolist() if v > 0]
    if len(values) == 1 and bool((row.float() != SENTINEL).all()):
        return int(values[0]) - 1
    return "unwritten" if not values else f"mixed:{values[:4]}"


def fused_weight(moe, cfg, pname):
    """[every routed expert, ...] of full_weight()s in logical order, as gpt-oss
    passes them: w13 = w1 rows then w3 rows."""
    hidden, inter = cfg.get("hidden_size", 8), cfg.get("intermediate_size", 8)
    shards = ("w1", "w3") if pname == "w13" else ("w2",)
    return torch.stack(
        [torch.cat([full_weight(e, s, hidden, inter) for s in shards]) for e in range(cfg["num_routed_experts"])]
    )


def mxfp4_blocks(moe, param):
    """uint8 MXFP4 blocks of every local expert; every byte of expert e holds e + 1."""
    shape = (moe.num_local_experts, *param.shape[1:])
    return (torch.arange(moe.num_local_experts, dtype=torch.uint8) + 1).view(-1, 1, 1).expand(shape).clone()


def mxfp4_expert(block):
    values = block.unique().tolist()
    return values[0] - 1 if len(values) == 1 and values[0] > 0 else f"mixed:{values[:4]}"


def describe(moe, calls):
    from sglang.srt.layers.moe import kt_ep_wrapper
    from sglang.srt.layers.moe.fused_moe_triton import layer as layer_mod

    kt = moe.quant_method
    n = kt.num_gpu_experts
    return {
        "num_gpu_experts": n,
        "gpu_index_to_logical": [int(i) for i in kt.gpu_index_to_logical],
        "mask_len": int(kt.gpu_experts_mask.numel()),
        "mask_is_prefix": is_prefix(kt.gpu_experts_mask),
        "gpu_experts_per_layer": kt_ep_wrapper._KT_GPU_EXPERTS_MASKS.sum(dim=1).tolist(),
        "layer_id": moe.layer_id,
        "num_local_experts": moe.num_local_experts,
        "moe_tp_rank": moe.moe_tp_rank,
        "moe_ep_rank": moe.moe_ep_rank,
        "ktransformers_available": kt_ep_wrapper.KTRANSFORMERS_AVAILABLE,
        "kt_cpu_wrapper": type(kt.wrapper).__name__ if kt.wrapper is not None else None,
        "loader_calls": calls,
        "layer_file": layer_mod.__file__,
    }


def nvfp4_scales(moe):
    """Run the layer's real process_weights_after_loading (KTEPWrapperMethod's runs
    ModelOptNvFp4FusedMoEMethod's) and name the experts whose scales each GPU slot's
    derived tensors (g1/g2_alphas, w13/w2_input_scale_quant) are made of."""
    before = {
        name: getattr(moe, name).data.clone()
        for name in ("w13_weight_scale_2", "w2_weight_scale_2", "w13_input_scale", "w2_input_scale")
    }
    method = moe.quant_method
    method.process_weights_after_loading(moe)
    kt = type(method).__name__ == "KTEPWrapperMethod"
    n = method.num_gpu_experts if kt else moe.num_local_experts
    result = {f"loaded_{name}": t.tolist() for name, t in before.items()}
    result["num_slots"] = int(before["w2_weight_scale_2"].shape[0])
    result["cpu_wrapper_loaded"] = method.wrapper.loaded_maps if kt else None
    for gemm, shard, alphas in (("w13", "w1", moe.g1_alphas), ("w2", "w2", moe.g2_alphas)):
        quant = getattr(moe, f"{gemm}_input_scale_quant").data
        result[f"{gemm}_input_scale_quant_numel"] = quant.numel()
        result[f"{gemm}_slots"] = [
            decode_nvfp4_slot(float(alphas[k]), float(quant[k] if quant.numel() > 1 else quant), shard)
            for k in range(n)
        ]
    return result


def decode_nvfp4_slot(alpha, input_scale_quant, shard):
    """{"input_scale": expert, "weight_scale_2": expert} of one slot, from
    input_scale_quant = 1 / input_scale and alpha = input_scale * weight_scale_2;
    "nan" where an unwritten (NaN) row went in."""
    if math.isnan(input_scale_quant):
        return {"input_scale": "nan", "weight_scale_2": "nan" if math.isnan(alpha) else "?"}
    shift = NVFP4_W2_INPUT_SHIFT if shard == "w2" else 0
    input_expert = round(math.log2(input_scale_quant)) - 1 - shift
    ws2 = alpha * input_scale_quant
    ws2_expert = "nan" if math.isnan(ws2) else round(ws2) - 1 - (NVFP4_W2_WS2_OFFSET if shard == "w2" else 0)
    return {"input_scale": input_expert, "weight_scale_2": ws2_expert}


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


def whole_slots(experts):
    """What decode_slots() reports for slots that each hold one expert's whole shards, in this order."""
    return [{"w1": [e, 0], "w3": [e, 0], "w2": [e, 0]} for e in experts]


# ---------------------------------------------------------------- reading the results


def physical_map(res, cfg):
    """physical -> logical for the layer (identity under none/trivial)."""
    return res["physical_to_logical"] or list(range(cfg["num_routed_experts"]))


def reachable_slots(res, cfg):
    """(slot, logical expert it must hold) for every GPU slot that routing reaches on
    this rank: local ids below the rank's routed count, in slot order."""
    local = cfg["num_routed_experts"] // cfg.get("ep_size", 1)
    offset = cfg.get("ep_rank", 0) * local
    p2l = physical_map(res, cfg)
    ids = [e for e in res["gpu_index_to_logical"] if e < local]
    return [(k, p2l[offset + e]) for k, e in enumerate(ids)]


def held(slot):
    parts = [slot["w1"], slot["w3"], slot["w2"]]
    experts = {p[0] if isinstance(p, list) else f"bad:{p}" for p in parts}
    return experts.pop() if len(experts) == 1 else f"mixed:{parts}"


def wrong_weight_slots(res, cfg):
    """How many reachable slots hold another expert (all of them when loading raised)."""
    want = reachable_slots(res, cfg)
    if "error" in res:
        return len(want)
    return sum(held(res["slots"][k]) != e for k, e in want)
