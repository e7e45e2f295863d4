from __future__ import annotations

from pathlib import Path

import pytest

# The endpoint tests' fixtures (server, client, registry, pipeline, engine_loop), and
# finalizers that run when the suite is stopped with SIGTERM.
pytest_plugins = ("endpoint_support", "sigterm_teardown")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES
