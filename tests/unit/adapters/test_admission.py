"""The one wire-shape admission rule of both planes (SPEC §7, §7.3, §10.4)."""

from __future__ import annotations

import pytest

from relay.adapters import Dispatch, admit, can_dispatch

ADAPTERS = ["openai", "anthropic", "openai_responses"]
CROSS = [(a, b) for a in ADAPTERS for b in ADAPTERS if a != b]


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("batch", [False, True])
def test_same_shape_passes_through(adapter: str, batch: bool) -> None:
    admission = admit(adapter, adapter, host="h", batch=batch)
    assert admission.dispatch is Dispatch.PASS_THROUGH and admission.wire_shape == adapter
    assert can_dispatch(adapter, adapter)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_canonical_is_translated_live(adapter: str) -> None:
    assert admit("canonical", adapter, host="h").dispatch is Dispatch.TRANSLATE
    assert admit("canonical", adapter, host="h").wire_shape == adapter
    assert admit("canonical", adapter, host="h", batch=True).dispatch is Dispatch.REFUSE_CROSS_SHAPE


def test_embeddings_only_to_openai_and_never_translated() -> None:
    assert admit("embeddings", "openai", host="h").wire_shape == "embeddings"
    for adapter in ("anthropic", "openai_responses"):
        assert admit("embeddings", adapter, host="h").dispatch is Dispatch.REFUSE_BINDING
        assert not can_dispatch("embeddings", adapter)


@pytest.mark.parametrize(("shape", "adapter"), CROSS)
def test_live_cross_shape_is_translated(shape: str, adapter: str) -> None:
    admission = admit(shape, adapter, host="openai")
    assert admission.dispatch is Dispatch.TRANSLATE and admission.wire_shape == adapter


@pytest.mark.parametrize(("shape", "adapter"), CROSS)
def test_batch_items_are_never_translated(shape: str, adapter: str) -> None:
    assert admit(shape, adapter, host="other", batch=True).dispatch is Dispatch.REFUSE_CROSS_SHAPE


def test_the_documented_batch_exception() -> None:
    """§10.4: a Responses item to an ``openai`` binding on host ``openai`` goes as it is to chat."""
    admission = admit("openai_responses", "openai", host="openai", batch=True)
    assert admission.dispatch is Dispatch.PASS_THROUGH and admission.wire_shape == "openai"
    assert (
        admit("openai_responses", "anthropic", host="openai", batch=True).dispatch
        is Dispatch.REFUSE_CROSS_SHAPE
    )
    assert (
        admit("openai", "openai_responses", host="openai", batch=True).dispatch is Dispatch.REFUSE_CROSS_SHAPE
    )


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
    assert admit(shape, adapter, host="h").dispatch is Dispatch.REFUSE_CROSS_SHAPE
    assert not can_dispatch(shape, adapter)


@pytest.mark.parametrize(("shape", "adapter"), CROSS)
@pytest.mark.parametrize("host", ["other", "openai"])
def test_batch_items_under_translate_are_translated_like_live_requests(
    shape: str, adapter: str, host: str
) -> None:
    """SPEC §17 ``translate: true``: the live rule, §10.4's host-``openai`` exception included."""
    admission = admit(shape, adapter, host=host, batch=True, translate=True)
    assert admission == admit(shape, adapter, host=host)
    assert admission.dispatch is Dispatch.TRANSLATE and admission.wire_shape == adapter


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_translate_never_admits_what_live_refuses_or_canonical_items(adapter: str) -> None:
    assert admit(adapter, adapter, host="h", batch=True, translate=True).dispatch is Dispatch.PASS_THROUGH
    assert (
        admit("canonical", adapter, host="h", batch=True, translate=True).dispatch
        is Dispatch.REFUSE_CROSS_SHAPE
    )
    if adapter != "openai":
        assert (
            admit("embeddings", adapter, host="h", batch=True, translate=True).dispatch
            is Dispatch.REFUSE_BINDING
        )
