"""Probe: one EPLB rebalance at run time on 2 EP ranks (processes forked after one
import of sglang-kt, joined over torch.distributed gloo), through the fork's real
``ExpertLocationUpdater`` and a KT (or, as the control, a plain) ``FusedMoE``.

Each rank builds the layer as kt_remap_probe.py does (real FusedMoE, real
KTEPWrapperMethod, explicit GPU-expert mask, trivial expert-location metadata from the
real ``ExpertLocationMetadata``), loads every expert, runs the layer's real
``process_weights_after_loading`` (the CPU-expert engine records the map it loads
with), lists the tensors EPLB moves as the fork's models do
(``filter_moe_weight_param_global_expert``), and asks the real updater to move to the
map the real ``ExpertLocationMetadata.init_by_eplb`` computes from seeded counts.

argv: a JSON list of cases (kt_remap_probe keys; `kt: false` is the plain layer),
then the gloo timeout in seconds. Prints {"ranks": {rank: {"cases": [...], "error"}},
"hung": [ranks that sent nothing by the deadline]}.
"""

import json
import sys

import kt_remap_probe as probe
import torch
from gloo_ranks import run_ranks

WORLD = 2
LAYER = 1
NUM_LAYERS = 4
COUNTS_SEED = 97


def rebalanced_metadata(server_args, routed):
    from sglang.srt.eplb import expert_location

    expert_location.ModelConfigForExpertLocation.from_model_config = staticmethod(
        lambda model_config: expert_location.ModelConfigForExpertLocation(
            num_layers=NUM_LAYERS, num_logical_experts=routed
        )
    )
    gen = torch.Generator().manual_seed(COUNTS_SEED)
    counts = torch.randint(0, 1000, (1, NUM_LAYERS, routed), generator=gen)
    return expert_location.ExpertLocationMetadata.init_by_eplb(server_args, None, counts)


def rebalance(rank, cfg):
    """One case on this rank: build, load, rebalance; what every slot then holds."""
    from sglang.srt.eplb.expert_location import get_global_expert_location_metadata
    from sglang.srt.eplb.expert_location_updater import ExpertLocationUpdater
    from sglang.srt.layers.moe.utils import filter_moe_weight_param_global_expert

    routed = cfg["num_routed_experts"]
    probe.set_process_groups(1, 0, WORLD, rank)
    server_args = probe.make_server_args(dict(cfg, ep_size=WORLD), NUM_LAYERS, 1, None)
    probe.install_server_args(server_args)
    if cfg.get("kt", True):
        probe.install_explicit_masks(NUM_LAYERS, routed, cfg["gpu_experts"])
    probe.install_trivial_metadata(server_args, routed, NUM_LAYERS, WORLD)
    moe = probe.build_moe(dict(cfg, path="trivial"), LAYER)
    probe.fill_sentinel(moe, probe.SENTINEL)
    probe.load_experts(moe, cfg, LAYER)
    moe.quant_method.process_weights_after_loading(moe)
    moved = [
        name
        for name, x in moe.named_parameters()
        if filter_moe_weight_param_global_expert(name, x, moe.num_local_experts)
    ]
    ExpertLocationUpdater().update(
        {LAYER: [getattr(moe, name) for name in moved]},
        rebalanced_metadata(server_args, routed),
        update_layer_ids=[LAYER],
        nnodes=1,
        rank=rank,
    )
    kt = moe.quant_method if cfg.get("kt", True) else None
    return dict(
        num_local_experts=moe.num_local_experts,
        moved=moved,
        physical_to_logical=get_global_expert_location_metadata().physical_to_logical_map_cpu[LAYER].tolist(),
        gpu_index_to_logical=None if kt is None else [int(i) for i in kt.gpu_index_to_logical],
        cpu_engine_maps=None if kt is None or kt.wrapper is None else kt.wrapper.loaded_maps,
        **probe.decode_slots(moe.w13_weight.data, moe.w2_weight.data),
    )


def main():
    sys.path.insert(0, str(probe.STUBS))
    import kt_cpu_stubs  # noqa: F401  (must precede sglang)
    import sglang.srt.layers.moe.fused_moe_triton.layer  # noqa: F401  (imported once, before the fork)

    cases, timeout = json.loads(sys.argv[1]), float(sys.argv[2])

    def work(rank, out):
        out["cases"] = [rebalance(rank, cfg) for cfg in cases]

    result = run_ranks(work, WORLD, timeout, deadline=2 * timeout + 30)
    print(json.dumps({"ranks": result["ranks"], "hung": result["hung"]}))


if __name__ == "__main__":
    main()
