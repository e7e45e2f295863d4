"""`python -m shakedown`: the same as the `shakedown` command."""

from shakedown.cli import main

raise SystemExit(main())
