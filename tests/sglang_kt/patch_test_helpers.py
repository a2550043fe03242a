"""The test helper sglang-kt 0001 adds to the package, ``sglang.test.cuda_import_stand_ins``, for running a
patch's own test against the stock package, which lacks it: loaded from the laid-out patched tree when the
package under test has none (a no-op where it has it). A pytest plugin (``-p patch_test_helpers``, this
folder and tests/ on PYTHONPATH); a probe imports it before the test module. The code under test stays the
stock package's: the helper only stands in for CUDA while the test's imports run."""

import importlib.util
import sys

import sglang.test

from helpers import TREES

NAME = "sglang.test.cuda_import_stand_ins"
PATCHED = TREES / "sglang-kt" / "python" / "sglang" / "test" / "cuda_import_stand_ins.py"


def provide() -> None:
    if importlib.util.find_spec(NAME) is not None:
        return
    spec = importlib.util.spec_from_file_location(NAME, PATCHED)
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    sglang.test.cuda_import_stand_ins = module


provide()
