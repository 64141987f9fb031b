"""The OpenAI Batches façade's pure rules (SPEC §14): the error file's ``code`` of every §10.4 cause,
the output and error lines' exact shape, and the line checker's numbering."""

from __future__ import annotations

import orjson
import pytest

from relay.domain.openai_batches import LineChecker, error_code, error_line, output_line


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("routing: model 'x' is not known", "routing_error"),
        ('rate limit exceeded: policy "p" allows 3 requests per 60s', "rate_limit_exceeded"),
        ("budget exceeded: policy spend", "budget_exceeded"),
        ("credential no longer valid: key revoked", "credential_invalid"),
        ('policy unavailable: policy "p" is disabled', "policy_unavailable"),
        ("cross-shape dispatch: item shape openai, binding adapter anthropic", "cross_shape"),
        ('all keys of host "h" failed', "upstream_unavailable"),
        ('no healthy keys for host "h"', "upstream_unavailable"),
        ("worker lost: replica r1 stopped answering", "worker_lost"),
        ("timeout: item ran longer than RELAY_BATCH_ITEM_TIMEOUT_S (300 s)", "request_timeout"),
        ("expired: batch expired at 2026-12-02T00:00:00Z", "batch_expired"),
        ("cancelled", "batch_cancelled"),
        ("load input: the request file of item 3 is missing", "load_input"),
        ("internal error: KeyError", "internal_error"),
    ],
)
def test_every_cause_has_its_code(error: str, code: str) -> None:
    assert error_code(error) == code
    line = orjson.loads(error_line("batch_req_1", "c1", error, None, "rid"))
    assert line == {
        "id": "batch_req_1",
        "custom_id": "c1",
        "response": None,
        "error": {"code": code, "message": error},
    }


def test_an_upstream_answer_is_a_response_line() -> None:
    line = orjson.loads(error_line("batch_req_1", "c1", "upstream returned 429", 429, "rid"))
    body = {"error": {"message": "upstream returned 429", "type": "upstream_error"}}
    assert line == {
        "id": "batch_req_1",
        "custom_id": "c1",
        "response": {"status_code": 429, "request_id": "rid", "body": body},
        "error": None,
    }
    ok = orjson.loads(output_line("batch_req_2", "c2", 200, "rid2", b'{"choices": []}'))
    assert ok == {
        "id": "batch_req_2",
        "custom_id": "c2",
        "response": {"status_code": 200, "request_id": "rid2", "body": {"choices": []}},
        "error": None,
    }


def test_lines_are_numbered_from_one_with_blank_lines_counted() -> None:
    checker = LineChecker("/v1/embeddings", max_items=2)
    good = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}'
    bodies = [checker.feed(raw) for raw in (good, b"", good.replace(b'"a"', b'"b"'))]
    assert checker.errors() == [] and checker.custom_ids == ["a", "b"] and bodies == [b"{}", None, b"{}"]
    assert not checker.failed
    checker.feed(good.replace(b'"a"', b'"c"'))
    assert [(e["code"], e["line"]) for e in checker.errors()] == [("too_many_requests", None)]
    assert checker.failed and checker.past_limit
