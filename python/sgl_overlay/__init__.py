"""sgl-overlay: upstream-shaped SGLang fixes applied onto pinned trees."""

__version__ = "0.1.0"
