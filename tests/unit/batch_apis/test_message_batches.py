"""The Message Batches façade's pure half (SPEC §15): processing status derived from the engine's
columns, the cancel answer, ``results_url`` only once ended, and the result line of every item state."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from relay.batch_apis.anthropic_service import message_batch, processing_status, results_url
from relay.domain.batch_record import BatchRecord, ResultRow
from relay.domain.batches import expired_error
from relay.domain.message_batches import result_line

CREATED = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
RECORD = BatchRecord(
    id="msgbatch_0123456789abcdefghjkmnpqrs",
    owner="o",
    key_hash=None,
    token_claims=None,
    policy_id="p",
    policy_name="p",
    project_id="pr",
    team_id="t",
    principal_kind="serviceaccount",
    principal_id="sa",
    credential_kind="key",
    credential_id="k",
    inbound_shape="anthropic",
    status="queued",
    total_items=3,
    created_at=CREATED,
    completed_at=None,
    api="anthropic",
)
COUNTS = {"processing": 1, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 0}


def test_status_is_derived_from_the_engine_columns() -> None:
    assert processing_status(RECORD) == "in_progress"
    canceling = replace(RECORD, cancel_requested_at=CREATED + timedelta(seconds=1))
    assert processing_status(canceling) == "canceling"
    ended = replace(canceling, completed_at=CREATED + timedelta(seconds=2))
    assert processing_status(ended) == "ended"


def test_results_url_and_ended_at_only_once_ended_and_the_cancel_answer_reads_canceling() -> None:
    base = "https://relay.example.com/"
    running = message_batch(RECORD, COUNTS, base)
    assert running["results_url"] is None and running["ended_at"] is None
    assert running["expires_at"] == "2026-12-03T01:00:00Z" and running["created_at"] == "2026-12-02T01:00:00Z"
    ended = replace(RECORD, completed_at=CREATED + timedelta(minutes=1))
    shown = message_batch(ended, COUNTS, base)
    assert shown["processing_status"] == "ended" and shown["ended_at"] == "2026-12-02T01:01:00Z"
    assert shown["results_url"] == results_url(base, RECORD.id)
    assert (
        shown["results_url"] == f"https://relay.example.com/anthropic/v1/messages/batches/{RECORD.id}/results"
    )
    answer = message_batch(ended, COUNTS, base, canceling=True)
    assert answer["processing_status"] == "canceling" and answer["results_url"] is None


@pytest.mark.parametrize(
    ("row", "body", "result"),
    [
        (
            ResultRow(0, "completed", None, None, "a", 200),
            b'{"type": "message"}',
            {"type": "succeeded", "message": {"type": "message"}},
        ),
        (ResultRow(1, "cancelled", "cancelled", None, "b"), None, {"type": "canceled"}),
        (ResultRow(2, "cancelled", expired_error(CREATED), None, "c"), None, {"type": "expired"}),
        (
            ResultRow(3, "discarded", "upstream returned 404", None, "d", 404),
            None,
            {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "upstream returned 404"},
                },
            },
        ),
        (
            ResultRow(4, "discarded", "timeout: item ran longer", None, "e", 200),
            None,
            {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": "api_error", "message": "timeout: item ran longer"},
                },
            },
        ),
    ],
)
def test_result_lines(row: ResultRow, body: bytes | None, result: dict[str, object]) -> None:
    line = result_line(row, body)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert orjson.loads(line) == {"custom_id": row.custom_id, "result": result}


def test_a_completed_item_without_a_readable_body_is_an_api_error_not_a_false_success() -> None:
    got = orjson.loads(result_line(ResultRow(0, "completed", None, None, "a", 200), None))
    assert got["result"]["type"] == "errored" and got["result"]["error"]["error"]["type"] == "api_error"
