"""Refused creates and failed validations of the OpenAI Batches façade (SPEC §14): every bad parameter
is a 400 naming its ``param`` with nothing created; every bad line of the input file leaves a
``failed`` batch whose ``errors`` name the line (1-based) and the field, with no item, no usage event
and no file; unknown and foreign files are 404 ``file not found``. On SQLite and Postgres."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import batch_events
from tests.integration.openai_batches.helpers import body_for, jsonl, line, raw, sdk, upload

CHAT = "/v1/chat/completions"
GOOD = line("ok", CHAT, body_for(CHAT, 0))


def _create(gw: Gateway, body: dict[str, Any], key: str | None = None) -> Any:
    return raw(gw, "POST", "/batches", key, json=body)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"endpoint": "/v1/completions"}, "endpoint"),
        ({"endpoint": None}, "endpoint"),
        ({"completion_window": "48h"}, "completion_window"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"output_expires_after": {"anchor": "now", "seconds": 3600}}, "output_expires_after.anchor"),
        ({"output_expires_after": {"anchor": "created_at", "seconds": 3599}}, "output_expires_after.seconds"),
        (
            {"output_expires_after": {"anchor": "created_at", "seconds": 2_592_001}},
            "output_expires_after.seconds",
        ),
        ({"input_file_id": 7}, "input_file_id"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(gateway: Gateway, change: dict[str, Any], param: str) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    file_id = upload(sdk(gw, key), jsonl([GOOD]))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h", **change}
    answer = _create(gw, body, key)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert raw(gw, "GET", "/batches", key).json()["data"] == []  # nothing created


def test_unknown_and_foreign_files_are_404(gateway: Gateway) -> None:
    gw = gateway
    mine = upload(sdk(gw), jsonl([GOOD]))
    other = gw.mint_key()[1]
    expected = {"error": {"type": "invalid_request_error", "code": "not_found", "message": "file not found"}}
    for file_id in (mine, "file-doesnotexist"):
        with pytest.raises(openai.NotFoundError) as caught:
            sdk(gw, other).batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
        assert caught.value.response.json() == expected
    assert raw(gw, "GET", "/batches", other).json()["data"] == []


def _bad(custom_id: str = "x", **changes: Any) -> dict[str, Any]:
    return {**line(custom_id, CHAT, body_for(CHAT, 0)), **changes}


CASES: list[tuple[list[bytes], list[tuple[int | None, str | None, str]]]] = [
    ([b"not json"], [(1, None, "invalid_json_line")]),
    ([b"[1, 2]"], [(1, None, "invalid_json_line")]),
    ([json.dumps({**_bad(), "custom_id": None}).encode()], [(1, "custom_id", "invalid_custom_id")]),
    ([json.dumps(_bad(method="GET")).encode()], [(1, "method", "invalid_method")]),
    ([json.dumps(_bad(url="/v1/embeddings")).encode()], [(1, "url", "invalid_url")]),
    ([json.dumps(_bad(body="hi")).encode()], [(1, "body", "invalid_body")]),
    ([json.dumps(_bad(body={**body_for(CHAT, 0), "stream": True})).encode()],
     [(1, "body.stream", "invalid_body")]),
    (
        [json.dumps(_bad("a")).encode(), b"", json.dumps(_bad("b")).encode(), json.dumps(_bad("a")).encode()],
        [(4, "custom_id", "duplicate_custom_id")],
    ),
    ([json.dumps(GOOD).encode(), b"{", json.dumps(_bad("z", method="PUT")).encode()],
     [(2, None, "invalid_json_line"), (3, "method", "invalid_method")]),
    ([], [(None, None, "empty_file")]),
    ([b"", b"   "], [(None, None, "empty_file")]),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "expected"), CASES)
def test_a_bad_line_fails_the_batch_with_line_numbered_errors(
    gateway: Gateway, lines: list[bytes], expected: list[tuple[int | None, str | None, str]]
) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    client = sdk(gw, key)
    file_id = upload(client, b"\n".join(lines) + (b"\n" if lines else b""))
    created = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    assert created.status == "validating"
    _assert_failed(gw, key, created.id, expected)


def test_too_many_lines_fail_with_a_null_line(gateway: Gateway) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    client = sdk(gw, key)
    content = b"".join(
        b'{"custom_id":"%d","method":"POST","url":"%s","body":{}}\n' % (i, CHAT.encode())
        for i in range(50_001)
    )
    created = client.batches.create(
        input_file_id=upload(client, content), endpoint=CHAT, completion_window="24h"
    )
    _assert_failed(gw, key, created.id, [(None, None, "too_many_requests")])


def _assert_failed(
    gw: Gateway, key: str, batch_id: str, expected: list[tuple[int | None, str | None, str]]
) -> None:
    shown = raw(gw, "GET", f"/batches/{batch_id}", key).json()
    assert shown["status"] == "failed", shown
    assert shown["failed_at"] == shown["created_at"] and shown["in_progress_at"] is None
    assert shown["errors"]["object"] == "list"
    got = [(e["line"], e["param"], e["code"]) for e in shown["errors"]["data"]]
    assert got == expected, shown["errors"]
    assert all(e["message"] for e in shown["errors"]["data"])
    assert shown["output_file_id"] is None and shown["error_file_id"] is None
    assert shown["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    native = gw.client.get(f"/v1/batches/{batch_id}", headers=gw.auth(key)).json()
    assert native["TotalItems"] == 0 and native["items"] == []  # no item
    assert batch_events(gw, batch_id) == []  # no usage event
    assert [f.purpose for f in sdk(gw, key).files.list()] == ["batch"]  # no output or error file
