"""Write a stand-in `sgl_kernel` package that routes to the extension.

Used to run sgl-kernel's own test file (sgl-kernel/tests/test_copy.py, patched)
against sgl_kernel_ext: the real sgl-kernel wheel is not installed where the
GPU tests run, so `import sgl_kernel` and `from sgl_kernel.elementwise import
copy_to_gpu_no_ce` must resolve to the extension. `copy_to_gpu_no_ce` is what the
sglang plugin installs in production (`sgl_kernel_ext.sglang_plugin.replacement()`);
`copy_list_to_gpu_no_ce` is the patched python/sgl_kernel/elementwise.py's own function
(cut out of the post-image with ast), calling the extension's namespace instead of
`torch.ops.sgl_kernel`. This shim is that routing and nothing else: the kernel code is the patch's post-image copy.cu.
"""

from __future__ import annotations

from pathlib import Path

INIT = '''"""Stand-in for sgl_kernel: routes to sgl_kernel_ext (tests/kernel/kernel_gpu_shim.py)."""
import os

import sgl_kernel_ext

try:
    sgl_kernel_ext.ensure_loaded()
except ImportError:
    sgl_kernel_ext.load_jit(build_directory=os.environ.get("SGL_KERNEL_EXT_BUILD_DIR"))

from sgl_kernel.elementwise import copy_list_to_gpu_no_ce, copy_to_gpu_no_ce  # noqa: E402,F401
'''

ELEMENTWISE = """from typing import List

import torch
from sgl_kernel_ext.sglang_plugin import replacement

copy_to_gpu_no_ce = replacement()


"""


def list_wrapper(elementwise_py: str) -> str:
    """The post-image elementwise.py's copy_list_to_gpu_no_ce, on the extension's ops."""
    import ast

    node = next(
        n
        for n in ast.parse(elementwise_py).body
        if isinstance(n, ast.FunctionDef) and n.name == "copy_list_to_gpu_no_ce"
    )
    source = ast.get_source_segment(elementwise_py, node)
    assert "torch.ops.sgl_kernel." in source, source
    return source.replace("torch.ops.sgl_kernel.", "torch.ops.sgl_kernel_ext.") + "\n"


def write_shim(dest: Path, elementwise_py: str) -> Path:
    """The package under dest; elementwise_py: the post-image sgl_kernel/elementwise.py."""
    pkg = dest / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "elementwise.py").write_text(ELEMENTWISE + list_wrapper(elementwise_py))
    return dest
