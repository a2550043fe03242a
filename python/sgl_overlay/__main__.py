from sgl_overlay.cli import main

raise SystemExit(main())
