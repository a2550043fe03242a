"""sglang general plugin (entry point group ``sglang.srt.plugins``).

sglang 0.5.23 calls ``sglang.srt.plugins.load_plugins()`` early in every
process (engine, scheduler, detokenizer, DP controller); it runs each installed
plugin's function and then ``HookRegistry.apply_hooks()``. ``register`` asks for
REPLACE hooks on

- ``sgl_kernel.elementwise.copy_to_gpu_no_ce`` (``TARGET``): the patched op for
  every N <= MAX_N. apply_hooks sets the attribute and re-points every module that
  holds the original by ``from ... import`` (e.g. the ``sgl_kernel`` package
  re-export);
- ``copy_list_to_gpu_no_ce`` in ``srt/layers/moe/moe_runner/deep_gemm.py``
  (``CALLER_NO_CE``), the DeepGEMM MoE runner's no-copy-engine branch, and
  ``copy_list_to_gpu`` in the same module (``CALLER_PINNED``), its copy-engine branch,
  where the patched sglang has it (the DeepGEMM caller patch): each becomes
  ``sgl_kernel_ext.list_copier(original)``, a C type whose call reads an exact list or
  tuple of 1..MAX_N ints in int32 and launches once, and hands every other input to the
  original caller, so that input gets the original's answer. A type because the
  HookRegistry installs a REPLACE class as it is, and wraps a REPLACE function in a
  Python frame (``wrapper(*args, **kwargs)``) on the path these hooks exist to shorten.

The caller hooks need the built extension (``sgl_kernel_ext._C``); without it
they are left out with a warning and the op hook still loads the extension at
its first call.

``register`` asks for the hooks once per process; later calls do nothing.

Opt-in: nothing happens unless this package is installed. Turn it off with
``SGL_KERNEL_EXT_DISABLE=1``, or leave its name out of ``SGLANG_PLUGINS``.
"""

from __future__ import annotations

import importlib
import logging
import os

logger = logging.getLogger(__name__)

TARGET = "sgl_kernel.elementwise.copy_to_gpu_no_ce"
CALLER_MODULE = "sglang.srt.layers.moe.moe_runner.deep_gemm"
CALLER_NO_CE = f"{CALLER_MODULE}.copy_list_to_gpu_no_ce"
CALLER_PINNED = f"{CALLER_MODULE}.copy_list_to_gpu"

# Set once register() has asked for its hooks: plugin loaders may run a plugin more than
# once per process (vLLM documents it), and a second pass would wrap the already replaced
# copy_list_to_gpu and make sglang warn about duplicate REPLACE hooks.
_registered = False


def replacement():
    """The function register() installs: the extension's wrapper, looked up once here
    rather than at each call (the extension itself loads at the first call)."""
    import sgl_kernel_ext

    return sgl_kernel_ext.copy_to_gpu_no_ce


def caller_replacement(original):
    """What a caller becomes: the one-launch copy, ``original`` for any other input."""
    import sgl_kernel_ext

    return sgl_kernel_ext.list_copier(original)


def register() -> bool:
    """Ask sglang's HookRegistry for the hooks above, once per process: a later call (a
    loader that runs plugins again) registers nothing and returns True."""
    global _registered
    if _registered:
        return True
    if os.environ.get("SGL_KERNEL_EXT_DISABLE", "") not in ("", "0"):
        logger.info("sgl_kernel_ext: disabled by SGL_KERNEL_EXT_DISABLE")
        return False
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, replacement(), HookType.REPLACE)
    _registered = True
    logger.info("sgl_kernel_ext: %s -> torch.ops.sgl_kernel_ext", TARGET)
    try:
        caller = importlib.import_module(CALLER_MODULE)
        hooks = {
            target: caller_replacement(getattr(caller, target.rpartition(".")[2]))
            for target in (CALLER_NO_CE, CALLER_PINNED)
            if hasattr(caller, target.rpartition(".")[2])
        }
    except ImportError as exc:
        logger.warning("sgl_kernel_ext: caller fast path not installed (%s)", exc)
        return True
    for target, hook in hooks.items():
        HookRegistry.register(target, hook, HookType.REPLACE)
    logger.info("sgl_kernel_ext: %s -> sgl_kernel_ext.list_copier", ", ".join(hooks))
    return True
