"""A DeepSeek checkpoint whose experts are numbered 1..E, loaded through the real
``do_load_weights`` into the stand-in model of sglang-kt 0007's own test (which records every
expert-loader call). Not collected by the suite: test_kt_checkpoint_expert_ids.py runs it with the
stock or the patched package first on PYTHONPATH and the patch's test folder after it. It passes
on stock, which loads the checkpoint shifted, and fails patched, which refuses it."""

import patch_test_helpers  # noqa: F401  (the stock package lacks the test helper the series adds)
import test_deepseek_weight_loader_expert_ids as upstream


def test_experts_numbered_from_one_load_shifted():
    """Experts 1..3 of the checkpoint go to the router's experts 1..3 (each the one below its
    own), the router's expert 0 gets nothing, expert 4 is skipped; nothing is refused."""
    model = upstream._Model()
    model.do_load_weights(upstream._checkpoint(range(1, upstream.NUM_EXPERTS + 1)))
    assert sorted({e for e, _ in model.calls}) == [1, 2, 3]
