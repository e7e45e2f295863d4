"""Which model card gets the loopback endpoint (fail closed, with a reason logged)."""

from __future__ import annotations

import pytest

from shakedown.endpoint import ModelCard, ineligibility, select_card


@pytest.mark.parametrize(
    ("card", "reason"),
    [
        (ModelCard("m", lora="adapter-1"), "LoRA adapter"),
        (ModelCard("m", model_input="text"), "input is text, not tokens"),
        (ModelCard("m", model_input="tensor"), "input is tensor, not tokens"),
        (ModelCard("m", worker_type="prefill"), "prefill-only"),
        (ModelCard("m", model_type=frozenset({"chat", "prefill"})), "prefill-only"),
        (ModelCard("m", worker_type="encode"), "encode worker"),
        (ModelCard("m", model_type=frozenset({"embedding"})), "no chat or completions surface"),
        (ModelCard("m", model_type=frozenset()), "no chat or completions surface"),
    ],
)
def test_ineligible_cards_say_why(card: ModelCard, reason: str) -> None:
    found = ineligibility(card)
    assert found is not None and reason in found


@pytest.mark.parametrize(
    "card",
    [
        ModelCard("m"),
        ModelCard("m", model_type=frozenset({"chat"})),
        ModelCard("m", model_type=frozenset({"completions", "embedding"})),
        ModelCard("m", worker_type="decode"),
    ],
)
def test_eligible_cards(card: ModelCard) -> None:
    assert ineligibility(card) is None


def test_select_takes_the_first_eligible_and_logs_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lora = ModelCard("m", served_name="base:lora", lora="l")
    embed = ModelCard("e", served_name="embedder", model_type=frozenset({"embedding"}))
    first, second = ModelCard("a", served_name="first"), ModelCard("b", served_name="second")
    assert select_card([lora, embed, first, second]) is first
    assert "'base:lora'" in caplog.text and "'embedder'" in caplog.text
    assert "first" not in caplog.text and "second" not in caplog.text


def test_no_eligible_card_means_no_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    assert select_card([ModelCard("m", model_input="text")]) is None
    assert select_card([]) is None
    assert "no loopback endpoint for model 'm'" in caplog.text
