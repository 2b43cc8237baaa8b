"""`python -m export ...`: see export.cli."""

from export.cli import main

raise SystemExit(main())
