"""The guardrails' PII detectors (SPEC §20) on the labelled corpus of ``pii_corpus``: every positive is
found by its detector, and each detector's false-positive rate over every other text (the negatives
and the other types' positives) is measured and bounded; redaction labels each match with its type."""

from __future__ import annotations

import re

import pytest

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
