"""Pure parts: pricing in integer nano-USD, event rows, and payload-capture decisions (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from relay.adapters.base import Usage
from relay.pricing import cost_nanos
from relay.usage.capture import DEFAULT_MAX_BYTES, BodyCapture, PayloadRecord, capture_enabled, max_bytes
from relay.usage.event import MAX_ERROR_MESSAGE
from tests.integration.usage.helpers import make_event

PRICING_CASES: list[tuple[str, dict[str, Any] | None, Usage, int | None]] = [
    ("unpriced binding", None, Usage(1000, 1000), None),
    ("zero tokens", {"input": 2.5, "output": 10}, Usage(0, 0, 0), 0),
    # 1000 × 0.15 $/M = 0.00015 $ = 150 000 n$; 500 × 0.6 $/M = 300 000 n$
    ("float prices are exact", {"input": 0.15, "output": 0.6}, Usage(1000, 500), 450_000),
    ("one token at 2.5 $/M", {"input": 2.5, "output": 10}, Usage(1, 0), 2_500),
    # 800 uncached × 2.5 + 200 cached × 1.25 + 100 × 10 = 2000 + 250 + 1000 = 3250 $·tok/M → 3 250 000 n$
    (
        "cached input at its own price",
        {"input": 2.5, "output": 10, "cached_input": 1.25},
        Usage(1000, 100, 200),
        3_250_000,
    ),
    ("cached falls back to input (absent)", {"input": 2.5, "output": 10}, Usage(1000, 100, 200), 3_500_000),
    (
        "cached falls back to input (null)",
        {"input": 2.5, "output": 10, "cached_input": None},
        Usage(1000, 100, 200),
        3_500_000,
    ),
    # 0.075 $/M = 75 n$ per token; 0.0000001 $/M = 0.0001 n$ per token
    ("0.075 per million", {"input": 0.075, "output": 0.3}, Usage(3, 1), 525),
    ("rounds half up", {"input": 0.0005, "output": 0}, Usage(1, 0), 1),  # 0.5 n$ → 1
    ("rounds down below half", {"input": 0.0004, "output": 0}, Usage(1, 0), 0),  # 0.4 n$ → 0
    ("integer prices", {"input": 3, "output": 15}, Usage(1_000_000, 1_000_000), 18_000_000_000),
    # Large volumes stay exact: 10^9 tokens × 0.15 $/M = 150 $ = 1.5·10^11 n$ (a float sum would drift)
    ("large volumes", {"input": 0.15, "output": 0.15}, Usage(10**9, 0), 150_000_000_000),
    ("free model", {"input": 0, "output": 0}, Usage(5000, 5000, 100), 0),
    ("malformed pricing (no output)", {"input": 1.0}, Usage(10, 10), None),
    (
        "cached above input never goes negative",
        {"input": 1, "output": 1, "cached_input": 0},
        Usage(5, 0, 9),
        0,
    ),
]


@pytest.mark.parametrize(
    ("pricing", "usage", "expected"), [c[1:] for c in PRICING_CASES], ids=[c[0] for c in PRICING_CASES]
)
def test_cost_nanos(pricing: dict[str, Any] | None, usage: Usage, expected: int | None) -> None:
    result = cost_nanos(pricing, usage)
    assert result == expected
    assert result is None or type(result) is int


def test_an_event_clips_caller_controlled_strings_and_its_row_is_utc() -> None:
    """Clipped when built: the store writes the attributes themselves (``relay.store.usage``)."""
    plus_two = timezone(timedelta(hours=2))
    event = make_event(
        ts=datetime(2026, 3, 1, 14, 0, tzinfo=plus_two),
        model="m" * 10_000,
        error_kind="k" * 100,
        error_message="x" * 10_000,
    )
    row = event.to_row()
    assert row["ts"] == datetime(2026, 3, 1, 12, 0, tzinfo=UTC) and row["ts"].tzinfo == UTC
    assert len(row["model"]) == 200 and len(row["error_kind"]) == 64
    assert len(row["error_message"]) == MAX_ERROR_MESSAGE
    assert (event.model, event.error_message) == (row["model"], row["error_message"])
    assert set(row) >= {"id", "status", "cost_nanos", "relay_key_hash", "batch_idx", "ttft_ms"}


ON = {"payload_logging": {"enabled": True, "max_bytes": 4096}}
OFF = {"payload_logging": {"enabled": False}}


@pytest.mark.parametrize(
    ("settings", "policy", "key", "expected"),
    [
        ({}, True, True, False),  # no setting stored: off
        (OFF, True, True, False),
        (ON, False, False, False),
        (ON, True, False, True),
        (ON, False, True, True),
        (ON, True, True, True),
        ({"payload_logging": {"enabled": "yes"}}, True, True, False),  # only a real true switches it on
        ({"payload_logging": "on"}, True, True, False),
    ],
)
def test_capture_needs_the_global_switch_and_policy_or_key(
    settings: dict[str, Any], policy: bool, key: bool, expected: bool
) -> None:
    assert capture_enabled(settings, policy, key) is expected


def test_max_bytes_defaults_to_one_mebibyte_and_ignores_junk() -> None:
    assert max_bytes({}) == DEFAULT_MAX_BYTES == 1024 * 1024
    assert max_bytes(ON) == 4096
    assert max_bytes({"payload_logging": {"enabled": True, "max_bytes": 10}}) == DEFAULT_MAX_BYTES
    assert max_bytes({"payload_logging": {"enabled": True, "max_bytes": True}}) == DEFAULT_MAX_BYTES


def test_body_capture_keeps_the_first_bytes_and_flags_truncation() -> None:
    capture = BodyCapture(10)
    capture.add(b"data: 1\n")
    assert capture.body == b"data: 1\n" and not capture.truncated
    capture.add(b"")
    assert not capture.truncated
    capture.add(b"data: 2\n")
    assert capture.body == b"data: 1\nda" and capture.truncated
    capture.add(b"more")
    assert capture.body == b"data: 1\nda" and len(capture) == 10


def test_body_capture_exactly_at_the_cap_is_not_truncated() -> None:
    capture = BodyCapture(4)
    capture.add(b"ab")
    capture.add(memoryview(b"cd"))
    assert capture.body == b"abcd" and not capture.truncated


def test_payload_record_row() -> None:
    ts = datetime(2026, 3, 1, tzinfo=UTC)
    record = PayloadRecord(request_id="r1", ts=ts, request_body=b"{}", response_body=b"data: x")
    assert record.size == 9
    assert record.to_row() == {
        "request_id": "r1",
        "ts": ts,
        "request_body": b"{}",
        "response_body": b"data: x",
        "request_truncated": False,
        "response_truncated": False,
    }
