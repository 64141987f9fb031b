"""OpenAI Batches creates from a large input file (SPEC §14, §17 "Scale") against real ``relay serve``
processes, SQLite with the ``files`` payload store and Postgres with the ``database`` one, with the
official ``openai`` SDK: the file (several 1 MiB read chunks, lines cut across them) is read line by
line while the items are written (``relay.batch_apis.openai_create``) and makes one item per line in
line order, each with its own body; a bad line near the end fails the batch with exactly the errors a
whole read reports (line numbers of the whole file) and leaves no item, no request body, no payload
directory."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from relay.store import tables as t
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, start_gateway, uniq
from tests.integration.openai_batches.helpers import (
    body_for,
    file_lines,
    jsonl,
    line,
    raw,
    sdk,
    upload,
    wait_ended,
)

COMBOS = [("sqlite", "files"), ("postgres", "database")]
CHAT = "/v1/chat/completions"
MAX_ITEMS = 2_000
N = 1_500
PADDING = "x" * 2_000  # ~2 KiB a line: 1 500 lines are 3 MiB, three read chunks and more


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{b}-{s}" for b, s in COMBOS])
def gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    backend, store = request.param
    workdir: Path = tmp_path_factory.mktemp(f"oa-large-{backend}-{store}")
    env = {**GATEWAY_ENV, "RELAY_BATCH_PAYLOAD_STORE": store, "RELAY_BATCH_MAX_ITEMS": str(MAX_ITEMS)}
    yield from start_gateway(backend, workdir, fake_upstream, live_reaper, env)


def lines(n: int, prefix: str = "c") -> list[dict[str, Any]]:
    return [line(f"{prefix}{i}", CHAT, body_for(CHAT, i, user=f"{i}-{PADDING}")) for i in range(n)]


def written(gw: Gateway) -> tuple[int, int]:
    """(request chunks, payload directories): what a failed create must leave unchanged."""
    root = Path(gw.relay.workdir) / "relay-batch-payloads"
    dirs = len(list(root.iterdir())) if root.exists() else 0
    P = t.payload_chunks
    chunks = gw.sql(select(func.count()).select_from(P).where(P.c.kind == "request"))
    return int(chunks), dirs


def test_a_large_file_makes_one_item_per_line_in_order(gateway: Gateway) -> None:
    gw = gateway
    client = sdk(gw)
    content = jsonl(lines(N))
    assert len(content) > 3 << 20, "the file must span several read chunks"
    file_id = upload(client, content)
    created = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    assert created.status == "validating" and created.request_counts is not None
    assert created.request_counts.total == N
    ended = wait_ended(client, created.id, timeout=240)
    assert ended.status == "completed" and ended.request_counts is not None
    assert ended.request_counts.completed == N
    out = file_lines(client, ended.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(f"c{i}" for i in range(N))
    # Each item ran its own line's body: the fake model echoes the line's "item {i}".
    for o in out:
        text = o["response"]["body"]["choices"][0]["message"]["content"]
        assert f"item {o['custom_id'][1:]}" in text, (o["custom_id"], text)
    native = gw.client.get(f"/v1/batches/{created.id}", headers=gw.auth(None)).json()
    assert native["TotalItems"] == N


def _bad_endings() -> list[tuple[bytes, list[tuple[int | None, str | None, str]]]]:
    good = lines(N, prefix="b")
    base = jsonl(good)
    stream = line("s", CHAT, body_for(CHAT, 0, stream=True))
    return [
        (base[: -len(jsonl(good[-1:]))] + b"{\n" + jsonl(good[-1:]), [(N, None, "invalid_json_line")]),
        (base + jsonl([good[3]]), [(N + 1, "custom_id", "duplicate_custom_id")]),
        (base + b"\n" + jsonl([stream]), [(N + 2, "body.stream", "invalid_body")]),
        (
            jsonl([*good[:10], line("m", CHAT, body_for(CHAT, 0), method="GET"), *good[10:]]) + b"{\n",
            [(11, "method", "invalid_method"), (N + 2, None, "invalid_json_line")],
        ),
        (jsonl(lines(MAX_ITEMS + 1, prefix="t")), [(None, None, "too_many_requests")]),
    ]


@pytest.mark.parametrize(
    ("content", "expected"), _bad_endings(), ids=["json", "duplicate", "stream", "two-errors", "too-many"]
)
def test_a_bad_line_near_the_end_fails_the_batch_and_writes_no_item(
    gateway: Gateway, content: bytes, expected: list[tuple[int | None, str | None, str]]
) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    client = sdk(gw, key)
    file_id = upload(client, content)
    before = written(gw)
    created = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    assert created.status == "validating"
    shown = raw(gw, "GET", f"/batches/{created.id}", key).json()
    assert shown["status"] == "failed", shown
    got = [(e["line"], e["param"], e["code"]) for e in shown["errors"]["data"]]
    assert got == expected, shown["errors"]
    assert shown["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    native = gw.client.get(f"/v1/batches/{created.id}", headers=gw.auth(key)).json()
    assert native["TotalItems"] == 0 and native["items"] == []
    time.sleep(0.2)  # a leftover would have been written before the answer; nothing may appear after it
    assert written(gw) == before  # the bodies written before the bad line were discarded
    assert [f.purpose for f in client.files.list()] == ["batch"]


def test_an_idempotent_large_create_is_answered_once(gateway: Gateway) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    file_id = upload(sdk(gw, key), jsonl(lines(N, prefix="i")))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    headers = {**gw.auth(key), "Idempotency-Key": uniq("oa-large")}
    first = gw.client.post("/openai/v1/batches", json=body, headers=headers)
    assert first.status_code == 200, first.text
    before = written(gw)
    again = gw.client.post("/openai/v1/batches", json=body, headers=headers)
    assert (again.status_code, again.content) == (200, first.content)
    assert written(gw) == before
    listed = raw(gw, "GET", "/batches", key).json()["data"]
    assert [b["id"] for b in listed] == [json.loads(first.content)["id"]]
    wait_ended(sdk(gw, key), listed[0]["id"], timeout=240)
