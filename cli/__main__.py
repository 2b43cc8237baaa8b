"""`python -m cli ...`: the same as `tmr ...`."""

from cli.main import main

raise SystemExit(main())
