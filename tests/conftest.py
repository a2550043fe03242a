"""Shared fixtures: where the stock and patched upstream code lives (docs/DESIGN.md). The suites
import the shared helpers from tests/helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import env_key, export_tree, tree_dir


@pytest.fixture(scope="session")
def patched_root():
    """Callable target -> directory that holds the patched package (`sglang/`)."""

    def get(target: str) -> Path:
        override = os.environ.get(env_key("PATCHED", target))
        if override:
            return Path(override)
        root = tree_dir(target)
        return root / "python" if (root / "python").is_dir() else root

    return get


@pytest.fixture(scope="session")
def stock_root(tmp_path_factory):
    """Callable target -> directory that holds the unpatched package."""
    cache: dict[str, Path] = {}

    def get(target: str) -> Path:
        override = os.environ.get(env_key("STOCK", target))
        if override:
            return Path(override)
        if target not in cache:
            dest = export_tree(target, tmp_path_factory.mktemp(f"stock-{target}"))
            cache[target] = dest / "python" if (dest / "python").is_dir() else dest
        return cache[target]

    return get
