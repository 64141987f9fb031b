"""Submit bodies over 1 MiB (SPEC §10.1, §17 "Scale") against real ``relay serve`` processes, SQLite and
Postgres, each with both payload stores: such a body is spooled to a temporary file and parsed item by
item while the bodies are written, and behaves as a small one does — the batch runs and its results
come back in idx order, ``shape`` may follow ``requests``, an ``Idempotency-Key`` is honoured, and
every refusal (a bad item at the very end, too many items, a bad shape after the items, a cut body)
is a 400 naming the problem with nothing written: no batch, no payload files, no payload chunks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from relay.store import tables as t
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, start_gateway, uniq
from tests.integration.batch_api.helpers import chat_item, results, wait_finished

COMBOS = [("sqlite", "files"), ("sqlite", "database"), ("postgres", "files"), ("postgres", "database")]
MAX_ITEMS = 1_500
PADDING = "x" * 1_000  # ~1 KiB per item: 1 100 items make a body over the 1 MiB spool threshold


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{b}-{s}" for b, s in COMBOS])
def gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    backend, store = request.param
    workdir: Path = tmp_path_factory.mktemp(f"large-{backend}-{store}")
    env = {**GATEWAY_ENV, "RELAY_BATCH_PAYLOAD_STORE": store, "RELAY_BATCH_MAX_ITEMS": str(MAX_ITEMS)}
    yield from start_gateway(backend, workdir, fake_upstream, live_reaper, env)


def items(n: int) -> list[dict[str, Any]]:
    return [chat_item(i, metadata={"pad": PADDING}) for i in range(n)]


def written(gw: Gateway) -> tuple[int, int, int]:
    """(batches, request chunks, payload directories): what a refused submit must leave unchanged."""
    root = Path(gw.relay.workdir) / "relay-batch-payloads"
    dirs = len(list(root.iterdir())) if root.exists() else 0
    batches = gw.sql(select(func.count()).select_from(t.batches))
    P = t.payload_chunks
    chunks = gw.sql(select(func.count()).select_from(P).where(P.c.kind == "request"))  # responses: running
    return int(batches), int(chunks), dirs


def post(gw: Gateway, body: bytes, headers: dict[str, str] | None = None) -> Any:
    assert len(body) > 1 << 20, "the body must be over the spool threshold"
    return gw.client.post(
        "/v1/batches",
        content=body,
        headers={**gw.auth(None), "content-type": "application/json", **(headers or {})},
    )


def test_a_spooled_submit_runs_and_streams_its_results(gateway: Gateway) -> None:
    n = 1_100
    body = b'{"requests":' + orjson.dumps(items(n)) + b',\n "shape": "openai"}'  # shape after the items
    response = post(gateway, body)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer == {"id": answer["id"], "status": "queued", "total_items": n}
    view = wait_finished(gateway, answer["id"], timeout=120)
    assert view["counts"] == {"completed": n} and view["InboundShape"] == "openai"
    got = results(gateway, answer["id"], jsonl=True)
    assert [r["idx"] for r in got] == list(range(n))
    assert all(r["state"] == "completed" and "response" in r for r in got)


def test_an_idempotent_spooled_submit_is_answered_once(gateway: Gateway) -> None:
    body = orjson.dumps({"shape": "openai", "requests": items(1_100)})
    key = {"Idempotency-Key": uniq("large")}
    first = post(gateway, body, key)
    assert first.status_code == 202, first.text
    before = written(gateway)
    again = post(gateway, body, key)
    assert (again.status_code, again.content) == (202, first.content)
    assert written(gateway) == before
    other = post(gateway, body.replace(b'"item 0"', b'"item X"'), key)
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert written(gateway) == before
    wait_finished(gateway, first.json()["id"], timeout=120)


def refusals() -> list[tuple[bytes, str]]:
    good = items(1_100)
    return [
        (
            orjson.dumps({"shape": "openai", "requests": [*good, "last"]}),
            "requests[1100]: must be a JSON object",
        ),
        (
            orjson.dumps({"shape": "openai", "requests": [*good, {"model": "m", "stream": True}]}),
            "requests[1100]: stream is not allowed",
        ),
        (
            orjson.dumps({"shape": "openai", "requests": items(MAX_ITEMS + 1)}),
            f"at most {MAX_ITEMS} are allowed (RELAY_BATCH_MAX_ITEMS)",
        ),
        (orjson.dumps({"requests": good, "shape": "canonical"}), "shape 'canonical' cannot be batched"),
        (orjson.dumps({"requests": good}), "shape is required"),
        (orjson.dumps({"shape": "openai", "requests": good})[:-3], "the body must be a JSON object"),
    ]


@pytest.mark.parametrize(
    ("body", "message"), refusals(), ids=["item", "stream", "count", "shape", "no-shape", "cut"]
)
def test_spooled_refusals_name_the_problem_and_write_nothing(
    gateway: Gateway, body: bytes, message: str
) -> None:
    before = written(gateway)
    response = post(gateway, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"], error
    time.sleep(0.2)  # a leftover would have been written before the answer; nothing may appear after it
    assert written(gateway) == before
