"""`python -m sgl_overlay`: the sgl-overlay command line run as a module."""

from sgl_overlay.cli import main

raise SystemExit(main())
