"""The command line's way in, for `sgl-overlay` (the console script) and `python -m sgl_overlay`: Ctrl-C or
SIGTERM while the tool's modules load is one line, whether it lands in their code or in Python's import
machinery around it."""

import sys

STARTING = "sgl-overlay: interrupted while starting; nothing was changed"


def main() -> int:
    try:
        from sgl_overlay.engine import subproc

        # Recorded from here on, not raised: a module that catches everything while it loads cannot swallow it.
        subproc.catch_signals()
        from sgl_overlay import cli

        interrupted = subproc.caught() is not None
    except KeyboardInterrupt:
        interrupted = True
    if interrupted:
        print(STARTING, file=sys.stderr)
        return 130
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
