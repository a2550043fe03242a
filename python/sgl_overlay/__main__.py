"""`python -m sgl_overlay`: the sgl-overlay command line run as a module."""

import sys

try:  # Ctrl-C can land while Python loads cli, before the guard around cli's own imports runs
    from sgl_overlay.cli import main
except KeyboardInterrupt:
    from sgl_overlay import STARTING

    print(STARTING, file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
