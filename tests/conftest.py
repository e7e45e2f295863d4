from __future__ import annotations

from pathlib import Path

import pytest

# The endpoint tests' fixtures (server, client, registry, pipeline, engine_loop).
pytest_plugins = ("endpoint_support",)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES
