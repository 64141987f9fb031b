"""SPEC §20's stream window: whatever the chunking — a match split at every boundary — what is released
equals the whole text redacted, and after a block nothing (the match included) is ever released."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.domain.guardrails import Guardrail, merged, replace
from relay.request.guardrails.window import StreamWindow


def guardrail(action: str, *, regex: tuple[str, ...] = (), pii: tuple[str, ...] = ()) -> Guardrail:
    return Guardrail("gr_1", f"g-{action}", "output", action, "", tuple(re.compile(p) for p in regex), pii)


SECRET = guardrail("redact", regex=(r"sk-[a-z0-9]{8}",))
SSN = guardrail("redact", pii=("us_ssn",))
BLOCK = guardrail("block", regex=(r"forbidden",))
PIECES = st.sampled_from(["sk-abcdef12", "123-45-6789", "hello ", "sk-", "x", " ", "42", "-", "word"])


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def stream(window: StreamWindow, chunks: list[str]) -> str:
    return "".join(window.feed(c) for c in chunks) + window.finish()


@settings(max_examples=1000, deadline=None)
@given(st.lists(PIECES, max_size=30), st.lists(st.integers(0, 10_000), max_size=12), st.integers(16, 64))
def test_released_text_equals_the_whole_text_redacted_for_any_chunking(
    parts: list[str], cuts: list[int], size: int
) -> None:
    text = "".join(parts)
    # On a stream the redact guardrails read the answer's own text together (not one another's output).
    whole = replace(text, merged(SECRET.spans(text) + SSN.spans(text)))
    assert stream(StreamWindow([SECRET, SSN], size), chunked(text, cuts)) == whole
    assert "sk-abcdef12" not in whole


def test_a_match_split_at_every_boundary_is_redacted() -> None:
    text = "before sk-abcdef12 after"
    for at in range(1, len(text)):
        released = stream(StreamWindow([SECRET], 16), [text[:at], text[at:]])
        assert released == "before [REDACTED] after", at


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abc fordien", max_size=80), st.lists(st.integers(0, 10_000), max_size=10))
def test_nothing_is_released_after_a_block_nor_the_match(prefix: str, cuts: list[int]) -> None:
    text = prefix + "forbidden" + " and more text after it"
    window = StreamWindow([BLOCK], 32)
    released = []
    for chunk in chunked(text, cuts):
        released.append(window.feed(chunk))
        if window.blocked is not None:
            break
    released.append(window.finish())
    assert window.blocked is BLOCK
    assert "forbidden" not in "".join(released)
    assert window.feed("more") == "" and window.finish() == ""


def test_the_window_holds_back_at_most_its_size() -> None:
    window = StreamWindow([SECRET], 10)
    assert window.feed("a" * 25) == "a" * 15
    assert window.finish() == "a" * 10


def test_a_cut_keeps_the_neighbours_a_detector_looks_at() -> None:
    # An SSN glued to the digits before it is no SSN on the whole text; a release point between the
    # two must not make it one (the window shows the matchers the released text's last characters).
    text = "sk-abcdef12" * 3 + "123-45-6789" + "x" * 40
    whole = replace(text, merged(SECRET.spans(text) + SSN.spans(text)))
    assert "123-45-6789" in whole
    for size in (16, 20, 33):
        assert stream(StreamWindow([SECRET, SSN], size), [text]) == whole
        assert stream(StreamWindow([SECRET, SSN], size), [text[:33], text[33:]]) == whole
