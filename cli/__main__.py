"""`python -m export ...`: see cli.export."""

from cli.export import main

raise SystemExit(main())
