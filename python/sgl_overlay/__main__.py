"""The command line's way in, for `sgl-overlay` (the console script) and `python -m sgl_overlay`."""

import sys


def main() -> int:
    try:  # Ctrl-C can land while Python loads cli, before the guard around cli's own imports runs
        from sgl_overlay import cli
    except KeyboardInterrupt:
        from sgl_overlay import STARTING

        print(STARTING, file=sys.stderr)
        return 130
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
