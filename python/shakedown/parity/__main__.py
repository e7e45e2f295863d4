"""`python -m shakedown.parity ...`: the same as `shakedown parity ...`."""

from __future__ import annotations

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
