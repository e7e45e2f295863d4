"""Attaching the loopback endpoint to a worker: pick a card, build its pipeline, serve."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from shakedown._core import Pipeline

from .app import EndpointApp
from .cards import ModelCard, select_card
from .registry import EngineRegistry
from .server import LoopbackServer

log = logging.getLogger("shakedown.endpoint")


class LocalEndpoint:
    """A running loopback endpoint for one model card."""

    def __init__(
        self,
        card: ModelCard,
        pipeline: Pipeline,
        registry: EngineRegistry,
        *,
        port: int | None = None,
        api_key: str | None = None,
    ) -> None:
        """Built stopped; `start()` binds. `api_key` makes every request need that bearer
        token."""
        self.card = card
        self.pipeline = pipeline
        self.registry = registry
        self.app = EndpointApp(pipeline, registry, card.endpoint, api_key=api_key)
        self.server = LoopbackServer(self.app, port=port)

    @property
    def model(self) -> str:
        return self.pipeline.served_name

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def start(self) -> LocalEndpoint:
        self.server.start()
        log.info("loopback endpoint for %r at %s", self.model, self.base_url)
        return self

    def stop(self, timeout: float = 1.0) -> bool:
        return self.server.stop(timeout)

    def __enter__(self) -> LocalEndpoint:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def build_pipeline(card: ModelCard) -> Pipeline:
    return Pipeline(
        card.model_dir,
        served_name=card.served_name,
        reasoning_parser=card.reasoning_parser,
        tool_call_parser=card.tool_call_parser,
        parser_dialect=card.parser_dialect,
    )


def attach(
    cards: ModelCard | Iterable[ModelCard],
    registry: EngineRegistry,
    *,
    port: int | None = None,
    api_key: str | None = None,
) -> LocalEndpoint | None:
    """Serve the first eligible card on 127.0.0.1, or return None (logged) when none is.

    The engine may be registered before or after: until `registry` holds one under
    the card's endpoint name, generation requests get 503.
    """
    card = select_card([cards] if isinstance(cards, ModelCard) else cards)
    if card is None:
        return None
    pipeline = build_pipeline(card)
    return LocalEndpoint(card, pipeline, registry, port=port, api_key=api_key).start()
