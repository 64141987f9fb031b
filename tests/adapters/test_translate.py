from __future__ import annotations

import pytest

from relay.adapters import can_dispatch

ADAPTERS = ["openai", "anthropic", "openai_responses"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_same_shape(adapter: str) -> None:
    assert can_dispatch(adapter, adapter)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_canonical_goes_anywhere(adapter: str) -> None:
    assert can_dispatch("canonical", adapter)


def test_embeddings_only_to_openai() -> None:
    assert can_dispatch("embeddings", "openai")
    assert not can_dispatch("embeddings", "anthropic")
    assert not can_dispatch("embeddings", "openai_responses")


@pytest.mark.parametrize(
    ("shape", "adapter"),
    [
        ("openai", "anthropic"),
        ("anthropic", "openai"),
        ("openai_responses", "openai"),
        ("openai", "openai_responses"),
        ("anthropic", "openai_responses"),
        ("openai_responses", "anthropic"),
    ],
)
def test_cross_shape_is_refused(shape: str, adapter: str) -> None:
    assert not can_dispatch(shape, adapter)


@pytest.mark.parametrize(
    ("shape", "adapter"),
    [
        ("canonical", "embeddings"),
        ("canonical", "x"),
        ("x", "x"),
        ("embeddings", "embeddings"),
        ("canonical", "canonical"),
    ],
)
def test_unknown_names(shape: str, adapter: str) -> None:
    assert not can_dispatch(shape, adapter)
