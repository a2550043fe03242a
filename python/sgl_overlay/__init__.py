"""sgl-overlay: upstream-shaped SGLang fixes applied onto pinned trees."""

__version__ = "0.1.0"
# The one line for Ctrl-C or SIGTERM while the command line loads (cli, __main__).
STARTING = "sgl-overlay: interrupted while starting; nothing was changed"
