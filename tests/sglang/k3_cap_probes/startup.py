"""Probe: run sglang's real MegaMoE startup check on a table of configs.

argv[1]: JSON list of cases {"name", "arch", "cap", "args", "decode_max_bs"}.
Each case builds a real ``ServerArgs(model_path="dummy", moe_a2a_backend="megamoe",
...)`` the way upstream's hook tests do (the dummy path skips resolution), gives it
a model config naming the architecture, runs the real hooks the pipeline runs
before the check (``arg_groups/pipeline.py``): ``apply_cuda_graph_disaggregation_roles``
and the DP handlers (``handle_deprecated_dp_attention``, ``handle_data_parallelism``)
that resolve the per-DP chunk, then ``validate_mega_moe_token_budget_for_model`` with
the cap in ``SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK``.

argv[2:]: row counts to run through the runtime's pass count
(``mega_moe.mega_moe_passes``, one EP rank) under each case's cap, where the tree
has it.

Prints one JSON object: name -> {"error", "warnings", "max_running_requests",
"chunk", "passes": {rows: [passes, rows per pass]} or null}.
"""

import json
import logging
import os
import sys
import warnings
from types import SimpleNamespace

warnings.filterwarnings("ignore")

from log_lines import WarningLines  # noqa: E402
from sglang.srt.arg_groups import mega_moe_hook  # noqa: E402
from sglang.srt.arg_groups.cuda_graph_hook import (  # noqa: E402
    apply_cuda_graph_disaggregation_roles,
)
from sglang.srt.arg_groups.overrides import resolving_view  # noqa: E402
from sglang.srt.arg_groups.parallel_hook import (  # noqa: E402
    handle_data_parallelism,
    handle_deprecated_dp_attention,
)
from sglang.srt.layers.moe import mega_moe  # noqa: E402
from sglang.srt.model_executor.cuda_graph_config import (  # noqa: E402
    CudaGraphConfig,
    PhaseConfig,
)
from sglang.srt.runtime_context import get_parallel  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"


def server_args_for(case):
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
    return server_args


def runtime_passes(rows):
    """The runtime's (passes, rows per pass) for ``rows`` on every EP rank."""
    passes = getattr(mega_moe, "mega_moe_passes", None)
    if passes is None:
        return None
    with get_parallel().override(attn_dp_enabled=False):
        return {n: list(passes(n)) for n in rows}


def run_case(case, rows):
    server_args = server_args_for(case)
    cfg = resolving_view(server_args)
    os.environ[CAP_ENV] = str(case["cap"])
    lines = WarningLines()
    logger = logging.getLogger(mega_moe_hook.__name__)
    logger.addHandler(lines)
    try:
        mega_moe_hook.validate_mega_moe_token_budget_for_model(server_args)
    except ValueError as exc:
        error = str(exc)
    else:
        error = None
    finally:
        logger.removeHandler(lines)
    return {
        "error": error,
        "warnings": lines.lines,
        "max_running_requests": resolving_view(server_args).max_running_requests,
        "chunk": cfg.chunked_prefill_size,
        "passes": runtime_passes(rows),
    }


def main():
    cases = json.loads(sys.argv[1])
    rows = [int(n) for n in sys.argv[2:]]
    print(json.dumps({case["name"]: run_case(case, rows) for case in cases}))


if __name__ == "__main__":
    main()
