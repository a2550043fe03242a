"""Probe: run sglang's real MegaMoE startup budget check on a table of configs.

argv[1]: JSON list of cases {"name", "arch", "cap", "args", "decode_max_bs"}.
Each case builds a real ``ServerArgs(model_path="dummy", moe_a2a_backend="megamoe",
...)`` the way upstream's hook tests do (the dummy path skips resolution), gives it
a model config naming the architecture, runs the real hooks the pipeline runs
before the check (``arg_groups/pipeline.py``): ``apply_cuda_graph_disaggregation_roles``
(inside ``handle_cuda_graph_config``: a PD node drops the other phase's graph
backend unless the operator locked it) and the DP handlers
(``handle_deprecated_dp_attention``, ``handle_data_parallelism``) that resolve the
per-DP chunk, then ``validate_mega_moe_token_budget_for_model`` with the cap in
``SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK``.

Prints one JSON object: name -> {"accepted", "error", "chunk", "bounds"}; "bounds"
is a K3 case's per-phase row bound where the tree has it (patched), else null.
"""

import json
import os
import sys
import warnings
from types import SimpleNamespace

warnings.filterwarnings("ignore")

from sglang.srt.arg_groups import mega_moe_hook  # noqa: E402
from sglang.srt.arg_groups.cuda_graph_hook import (  # noqa: E402
    apply_cuda_graph_disaggregation_roles,
)
from sglang.srt.arg_groups.overrides import resolving_view  # noqa: E402
from sglang.srt.arg_groups.parallel_hook import (  # noqa: E402
    handle_data_parallelism,
    handle_deprecated_dp_attention,
)
from sglang.srt.model_executor.cuda_graph_config import (  # noqa: E402
    CudaGraphConfig,
    PhaseConfig,
)
from sglang.srt.server_args import ServerArgs  # noqa: E402

CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
K3_ARCHS = ("KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM")


def run_case(case):
    server_args = ServerArgs(
        model_path="dummy",
        moe_a2a_backend="megamoe",
        cuda_graph_config=CudaGraphConfig(
            decode=PhaseConfig(backend="full", max_bs=case["decode_max_bs"]),
            prefill=PhaseConfig(backend="disabled"),
        ),
        **case["args"],
    )
    server_args._model_config = SimpleNamespace(
        hf_config=SimpleNamespace(architectures=[case["arch"]]), hf_quant_config={}
    )
    server_args._cuda_graph_config_locked = set()
    apply_cuda_graph_disaggregation_roles(server_args)
    handle_deprecated_dp_attention(server_args)
    handle_data_parallelism(server_args)
    cfg = resolving_view(server_args)
    bounds = None
    row_bounds = getattr(mega_moe_hook, "mega_moe_row_bounds", None)
    if row_bounds is not None and case["arch"] in K3_ARCHS:
        bounds = {b.term: b.rows for b in row_bounds(server_args)}
    os.environ[CAP_ENV] = str(case["cap"])
    try:
        mega_moe_hook.validate_mega_moe_token_budget_for_model(server_args)
    except ValueError as exc:
        accepted, error = False, str(exc)
    else:
        accepted, error = True, None
    return {
        "accepted": accepted,
        "error": error,
        "chunk": cfg.chunked_prefill_size,
        "bounds": bounds,
    }


def main():
    cases = json.loads(sys.argv[1])
    print(json.dumps({case["name"]: run_case(case) for case in cases}))


if __name__ == "__main__":
    main()
