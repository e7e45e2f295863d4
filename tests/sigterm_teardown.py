"""pytest plugin: SIGTERM stops the run the way Ctrl-C does.

SIGTERM's default action ends pytest without tearing fixtures down, which would leave the
session's Dynamo frontend, mockers and loopback servers running. Raised as an interrupt,
pytest stops the run and its finalizers stop them.
"""

from __future__ import annotations

import signal

import pytest


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
