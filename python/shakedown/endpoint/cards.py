"""Model cards and which one the loopback endpoint may serve.

Mirrors the fields of Dynamo's model deployment card that decide eligibility: the
endpoint serves the first base-model card whose input is tokens and that has a chat
or completions surface. Everything else gets no endpoint (fail closed), with a log
line saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

log = logging.getLogger("shakedown.endpoint")

ModelInput: TypeAlias = Literal["tokens", "text", "tensor"]
WorkerType: TypeAlias = Literal["aggregated", "prefill", "decode", "encode"]

SURFACES = frozenset({"chat", "completions"})
DEFAULT_ENDPOINT = "dynamo.backend.generate"


@dataclass(frozen=True)
class ModelCard:
    """One model a worker serves. `model_type` holds Dynamo's type names
    (`chat`, `completions`, `embedding`, `tensor`, `prefill`, `images`, ...)."""

    model_dir: str
    served_name: str | None = None
    model_input: ModelInput = "tokens"
    model_type: frozenset[str] = SURFACES
    worker_type: WorkerType = "aggregated"
    lora: str | None = None
    endpoint: str = DEFAULT_ENDPOINT
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    # Whose reading of replies the parsers follow: "dynamo", "vllm" or "sglang".
    parser_dialect: str = "dynamo"

    @property
    def name(self) -> str:
        return self.served_name or self.model_dir


def ineligibility(card: ModelCard) -> str | None:
    """Why `card` gets no loopback endpoint, or None when it may be served."""
    if card.lora is not None:
        return f"it is a LoRA adapter ({card.lora}); only base models are served"
    if card.model_input != "tokens":
        return f"its input is {card.model_input}, not tokens"
    if card.worker_type == "prefill" or "prefill" in card.model_type:
        return "it is a prefill-only worker"
    if card.worker_type == "encode":
        return "it is an encode worker"
    if not card.model_type & SURFACES:
        kinds = ", ".join(sorted(card.model_type)) or "none"
        return f"it has no chat or completions surface (types: {kinds})"
    return None


def select_card(cards: Iterable[ModelCard]) -> ModelCard | None:
    """The first eligible card; logs why each card before it (and all, if none) was passed over."""
    for card in cards:
        reason = ineligibility(card)
        if reason is None:
            return card
        log.warning("no loopback endpoint for model %r: %s", card.name, reason)
    return None
