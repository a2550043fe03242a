"""sglang general plugin (entry point group ``sglang.srt.plugins``).

sglang 0.5.23 calls ``sglang.srt.plugins.load_plugins()`` early in every
process (engine, scheduler, detokenizer, DP controller); it runs each installed
plugin's function and then ``HookRegistry.apply_hooks()``. ``register`` asks for
a REPLACE hook on ``sgl_kernel.elementwise.copy_to_gpu_no_ce``; apply_hooks sets
the attribute and re-points every module that holds the original by
``from ... import`` (e.g. the ``sgl_kernel`` package re-export). sglang's caller,
``copy_list_to_gpu_no_ce`` in ``srt/layers/moe/moe_runner/deep_gemm.py``,
imports the name inside the function, so it gets the replacement.

Opt-in: nothing happens unless this package is installed. Turn it off with
``SGL_KERNEL_EXT_DISABLE=1``, or leave its name out of ``SGLANG_PLUGINS``.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

TARGET = "sgl_kernel.elementwise.copy_to_gpu_no_ce"


def replacement():
    """The function register() installs: the extension's wrapper, looked up once here
    rather than at each call (the extension itself loads at the first call)."""
    import sgl_kernel_ext

    return sgl_kernel_ext.copy_to_gpu_no_ce


def register() -> bool:
    if os.environ.get("SGL_KERNEL_EXT_DISABLE", "") not in ("", "0"):
        logger.info("sgl_kernel_ext: disabled by SGL_KERNEL_EXT_DISABLE")
        return False
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, replacement(), HookType.REPLACE)
    logger.info("sgl_kernel_ext: %s -> torch.ops.sgl_kernel_ext", TARGET)
    return True
