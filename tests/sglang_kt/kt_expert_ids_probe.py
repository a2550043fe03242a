"""Probe: load a checkpoint numbered 1..4 through the real do_load_weights into the stand-in
model of the patch's own test (imported from it, after patch_test_helpers gives a stock
package the test helper the series adds); print the loader calls and the error."""

import json


def main():
    import patch_test_helpers  # noqa: F401
    import test_deepseek_weight_loader_expert_ids as t

    model = t._Model()
    try:
        model.do_load_weights(t._checkpoint(range(1, t.NUM_EXPERTS + 1)))
        error = None
    except ValueError as exc:
        error = str(exc)
    print(json.dumps({"calls": model.calls, "error": error}))


if __name__ == "__main__":
    main()
