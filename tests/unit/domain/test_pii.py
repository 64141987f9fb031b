"""The guardrails' PII detectors (SPEC §20) on the labelled corpus of ``pii_corpus``: every positive is
found by its detector, and each detector's false-positive rate over every other text (the negatives
and the other types' positives) is measured and bounded; redaction labels each match with its type."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.domain import pii
from relay.domain.guardrails import Guardrail
from relay.domain.pii import DETECTORS, find, iban_valid, luhn_valid
from tests.unit.domain.pii_corpus import NEGATIVES, POSITIVES

#: The most false positives a detector may have over the texts that do not hold its type (measured:
#: 0 for the hand-written detectors, 1 of 44 for phonenumbers — an invoice date; the bound leaves room
#: for one look-alike per 20 texts).
MAX_FALSE_POSITIVE_RATE = 0.05


@pytest.mark.parametrize(("text", "pii_type"), POSITIVES)
def test_every_labelled_positive_is_found(text: str, pii_type: str) -> None:
    assert find(pii_type, text), f"{pii_type} missed in {text!r}"


@pytest.mark.parametrize("pii_type", sorted(DETECTORS))
def test_false_positive_rate_on_the_corpus_is_bounded(pii_type: str) -> None:
    others = NEGATIVES + [text for text, kind in POSITIVES if kind != pii_type]
    false = [text for text in others if find(pii_type, text)]
    rate = len(false) / len(others)
    assert rate <= MAX_FALSE_POSITIVE_RATE, f"{pii_type}: {rate:.1%} false positives: {false}"


def test_checksums() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("GB82 WEST 1234 5698 7654 32") and not iban_valid("GB82 WEST 1234 5698 7654 33")


def test_redaction_labels_each_match_with_its_type_and_regex_with_redacted() -> None:
    guardrail = Guardrail(
        "gr_1", "g", "input", "redact", "", (re.compile(r"secret-\d+"),), ("email", "us_ssn")
    )
    text = "mail a@b.io, ssn 123-45-6789, code secret-42"
    assert guardrail.redacted(text) == "mail [REDACTED:email], ssn [REDACTED:us_ssn], code [REDACTED]"
    assert guardrail.matches(text) and not guardrail.matches("nothing here")
    assert guardrail.redacted("nothing here") == "nothing here"


# Texts built from the characters the pre-checks look at, so that near-misses (a run one short, a
# separator in the wrong place, a non-ASCII digit) are common rather than rare.
_PIECES = st.sampled_from(
    ["4111 1111 1111 1111", "4111-1111-1111-1111", "192.168.0.1", "GB82 WEST 1234 5698 7654 32", "٣", "é"]
)
_TEXTS = st.lists(st.one_of(st.text(alphabet="0123456789 -.ABZabz@", max_size=24), _PIECES), max_size=8).map(
    "".join
)
_PATTERNS = {"credit_card": pii._CARD, "ipv4": pii._IPV4, "iban": pii._IBAN}


@pytest.mark.parametrize("pii_type", sorted(_PATTERNS))
@settings(max_examples=300, deadline=None)
@given(text=_TEXTS)
def test_the_ascii_pre_check_never_hides_a_candidate(pii_type: str, text: str) -> None:
    """The run pre-check is a necessary condition: whenever the detector's pattern has a candidate in
    the text, the pre-check lets the pattern run."""
    if _PATTERNS[pii_type].search(text):
        chars, run = {
            "credit_card": (pii._CARD_CHARS, pii._CARD_RUN),
            "ipv4": (pii._IPV4_CHARS, pii._IPV4_RUN),
            "iban": (pii._IBAN_CHARS, pii._IBAN_RUN),
        }[pii_type]
        assert pii._may_hold(text, chars, run)
