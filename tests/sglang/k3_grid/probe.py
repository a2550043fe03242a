"""Probe: run a grid of configurations through sglang's real resolution pipeline.

argv[1]: JSON file with {"models": {name: config.json dict}, "rows": [...]};
argv[2]: where to write the JSON result. Each row is {"id", "model", "args", "cap"}:
``ServerArgs(model_path=<a directory holding that config.json>, device="cuda",
moe_a2a_backend="megamoe", **args).resolve_once()`` runs the whole pipeline with
the cap in SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK, on a spoofed SM90
CUDA platform with 141 GiB of GPU memory (``override_platform``; the memory probe
``memory_hook.get_device_memory_capacity`` is patched: there is no GPU here).

"cap" is {"base": "prefill" | "decode" | "fixed", "delta" or "value"}: a base is
the oracle's bound for that phase, read from a resolution of the same row with an
unlimited cap, so every tree gets the same caps.

For each row the result holds the startup decision (accepted, the error, the
final max_running_requests, the log lines of the MegaMoE hook) and the oracle
(oracle.py) on the configuration that decision leaves: the resolved one when it
started, else the same row resolved with an unlimited cap. A row that the pipeline
refuses for another reason even with an unlimited cap is "invalid".
"""

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from unittest import mock

warnings.filterwarnings("ignore")
logging.disable(logging.INFO)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle import oracle, required_rows  # noqa: E402
from sglang.srt.arg_groups import mega_moe_hook, memory_hook  # noqa: E402
from sglang.srt.runtime_context import override_platform  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
UNLIMITED = 1 << 30
GPU_MEM_MIB = 141 * 1024
SM90 = dict(
    is_cuda=True,
    is_hip=False,
    is_npu=False,
    is_xpu=False,
    is_musa=False,
    is_mps=False,
    is_sm90=True,
    is_sm100=False,
    is_sm100_or_sm110=False,
    is_sm110=False,
    is_sm120=False,
    is_blackwell=False,
    device_sm=90,
    device_capability=(9, 0),
)


_REFERENCES = {}


def _no_check(server_args):
    return None


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


HOOK_LOG = _Lines()


def resolve(model_dir, args, cap):
    os.environ[CAP_ENV] = str(cap)
    args = dict(args)
    if "speculative_draft_model_path" in args:
        args["speculative_draft_model_path"] = str(model_dir.parent / args["speculative_draft_model_path"])
    server_args = ServerArgs(model_path=str(model_dir), device="cuda", moe_a2a_backend="megamoe", **args)
    server_args.resolve_once()
    return server_args


def _draft_moe(models, row) -> bool:
    """Whether the row's draft model has MoE layers (a NEXTN draft is the target's own)."""
    args = row["args"]
    if not args.get("speculative_algorithm"):
        return False
    if args["speculative_algorithm"] == "NEXTN":
        return True
    return "num_experts" in models.get(args.get("speculative_draft_model_path"), {})


def run_row(model_dirs, models, row):
    """One row, under the row's own environment variables ("env")."""
    env = row.get("env", {})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return _run_row(model_dirs, models, row)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_row(model_dirs, models, row):
    model_dir = model_dirs[row["model"]]
    arch = models[row["model"]]["architectures"][0]
    # The configuration the server runs with no MegaMoE check at all (one per
    # configuration: every cap of it shares it).
    key = row["config"]
    if key not in _REFERENCES:
        try:
            with mock.patch.object(mega_moe_hook, "validate_mega_moe_token_budget_for_model", _no_check):
                reference = resolve(model_dir, row["args"], UNLIMITED)
            bounds = oracle(reference, arch, _draft_moe(models, row))
        except Exception as exc:  # noqa: BLE001 - a configuration upstream refuses
            _REFERENCES[key] = f"{type(exc).__name__}: {exc}"
        else:
            _REFERENCES[key] = bounds
    bounds = _REFERENCES[key]
    if isinstance(bounds, str):
        return {"id": row["id"], "invalid": bounds}
    cap_spec = row["cap"]
    base = None if cap_spec["base"] == "fixed" else bounds[cap_spec["base"]]
    if base is None:
        cap = cap_spec.get("value", 8192)
    else:
        cap = max(base + cap_spec["delta"], 1)
    HOOK_LOG.lines = []
    try:
        server_args = resolve(model_dir, row["args"], cap)
    except ValueError as exc:
        accepted, error, final = False, str(exc), bounds
        max_running_requests = None
    else:
        accepted, error = True, None
        final = oracle(server_args, arch, _draft_moe(models, row))
        max_running_requests = server_args.max_running_requests
        from sglang.srt.arg_groups.overrides import resolved_view

        max_running_requests = resolved_view(server_args).max_running_requests
    return {
        "id": row["id"],
        "cap": cap,
        "accepted": accepted,
        "error": error,
        "log": list(HOOK_LOG.lines),
        "max_running_requests": max_running_requests,
        "reference": bounds,
        "oracle": final,
        "required": required_rows(final),
    }


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    models = spec["models"]
    logger = logging.getLogger("sglang.srt.arg_groups.mega_moe_hook")
    logger.addHandler(HOOK_LOG)
    logger.setLevel(logging.INFO)
    logging.disable(logging.NOTSET)
    logging.getLogger().setLevel(logging.CRITICAL)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model_dirs = {}
        for name, config in models.items():
            model_dirs[name] = Path(tmp) / name
            model_dirs[name].mkdir()
            (model_dirs[name] / "config.json").write_text(json.dumps(config))
        with (
            override_platform(**SM90),
            mock.patch.object(memory_hook, "get_device_memory_capacity", return_value=GPU_MEM_MIB),
        ):
            results = [run_row(model_dirs, models, row) for row in spec["rows"]]
    out = {"seconds": time.monotonic() - start, "rows": results}
    Path(sys.argv[2]).write_text(json.dumps(out))
    print(json.dumps({"rows": len(results), "seconds": out["seconds"]}))


if __name__ == "__main__":
    main()
