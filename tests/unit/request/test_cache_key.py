"""The response cache's key function (SPEC §19): what is and is not part of "the same request"."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from relay.request.cache.key import cache_key, canonical_body

BODY: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi", "name": "a"}],
    "temperature": 0.5,
}


def key(
    body: dict[str, Any], *, scope: str = "project", scope_id: str = "prj_1", shape: str = "openai"
) -> str:
    return cache_key(scope, scope_id, shape, body)


def test_the_key_is_a_sha256_hex_digest_and_stable() -> None:
    first = key(BODY)
    assert len(first) == 64 and int(first, 16) >= 0
    assert key(dict(BODY)) == first


def test_key_order_at_any_depth_does_not_matter() -> None:
    reordered = {
        "temperature": 0.5,
        "messages": [{"name": "a", "content": "hi", "role": "user"}],
        "model": "m",
    }
    assert key(reordered) == key(BODY)


def test_stream_stream_options_and_user_are_left_out() -> None:
    streamed = {**BODY, "stream": True, "stream_options": {"include_usage": True}, "user": "u-42"}
    assert key(streamed) == key(BODY)


def test_anything_else_changes_the_key() -> None:
    base = key(BODY)
    assert key({**BODY, "temperature": 0.6}) != base
    assert key({**BODY, "model": "n"}) != base
    assert key({**BODY, "messages": [{"role": "user", "content": "hi!"}]}) != base
    assert key({**BODY, "metadata": {"user_id": "u"}}) != base  # Anthropic's end-user id is the body's
    # Message order is meaning, not presentation.
    two = {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    swapped = {"model": "m", "messages": [{"role": "user", "content": "b"}, {"role": "user", "content": "a"}]}
    assert key(two) != key(swapped)


def test_scope_kind_scope_id_and_shape_each_change_the_key() -> None:
    base = key(BODY)
    assert key(BODY, scope_id="prj_2") != base
    assert key(BODY, scope="policy") != base
    assert key(BODY, shape="anthropic") != base
    # The parts are separated: moving a character from one part to the next is another key.
    assert cache_key("project", "ab", "c", BODY) != cache_key("project", "a", "bc", BODY)


def test_an_integer_past_64_bits_is_keyed_exactly() -> None:
    assert key({**BODY, "seed": 2**70}) != key({**BODY, "seed": 2**70 + 1})
    assert canonical_body({"seed": 2**70}) == b'{"seed":1180591620717411303424}'


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=6), _json, max_size=6))
def test_the_canonical_body_does_not_depend_on_insertion_order(body: dict[str, Any]) -> None:
    reversed_body = dict(reversed(list(body.items())))
    assert canonical_body(reversed_body) == canonical_body(body)
    assert key(reversed_body) == key(body)
