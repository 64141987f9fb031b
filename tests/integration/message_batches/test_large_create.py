"""Message Batches creates over 1 MiB (SPEC §15, §17 "Scale") against real ``relay serve`` processes,
SQLite and Postgres: such a body is spooled to a temporary file and read request by request while the
bodies are written, as a native submit is (``relay.batch_apis.anthropic_create.StreamedCreate``), and
behaves as a small one does — the batch runs and its results carry each request's ``custom_id``, an
``Idempotency-Key`` is honoured, and a refusal found at the very end is a 400 naming the request with
nothing written: no batch, no payload files, no payload chunks."""

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
from tests.integration.message_batches.helpers import PATH, jsonl, raw, request, sdk, wait_ended

COMBOS = [("sqlite", "files"), ("postgres", "database")]
MAX_ITEMS = 1_500
PADDING = "x" * 1_000  # ~1 KiB per request: 1 100 requests make a body over the 1 MiB spool threshold
N = 1_100


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{b}-{s}" for b, s in COMBOS])
def gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    backend, store = request.param
    workdir: Path = tmp_path_factory.mktemp(f"mb-large-{backend}-{store}")
    env = {**GATEWAY_ENV, "RELAY_BATCH_PAYLOAD_STORE": store, "RELAY_BATCH_MAX_ITEMS": str(MAX_ITEMS)}
    yield from start_gateway(backend, workdir, fake_upstream, live_reaper, env)


def requests(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [request(f"{prefix}{i}", i, metadata={"user_id": PADDING}) for i in range(n)]


def written(gw: Gateway) -> tuple[int, int, int]:
    """(batches, request chunks, payload directories): what a refused create must leave unchanged."""
    root = Path(gw.relay.workdir) / "relay-batch-payloads"
    dirs = len(list(root.iterdir())) if root.exists() else 0
    batches = gw.sql(select(func.count()).select_from(t.batches))
    P = t.payload_chunks
    chunks = gw.sql(select(func.count()).select_from(P).where(P.c.kind == "request"))
    return int(batches), int(chunks), dirs


def post(gw: Gateway, body: bytes, headers: dict[str, str] | None = None) -> Any:
    assert len(body) > 1 << 20, "the body must be over the spool threshold"
    return raw(
        gw,
        "POST",
        PATH,
        content=body,
        headers={"x-api-key": gw.key, "content-type": "application/json", **(headers or {})},
    )


def test_a_spooled_create_runs_and_its_results_carry_the_custom_ids(gateway: Gateway) -> None:
    body = orjson.dumps({"requests": requests(N)})
    response = post(gateway, body)
    assert response.status_code == 200, response.text
    created = response.json()
    assert created["processing_status"] == "in_progress"
    assert created["request_counts"]["processing"] == N
    ended = wait_ended(sdk(gateway), created["id"], N, timeout=120)
    assert ended.request_counts.succeeded == N
    lines = jsonl(raw(gateway, "GET", f"{PATH}/{created['id']}/results"))
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(N))
    assert all(line["result"]["type"] == "succeeded" for line in lines)


def test_an_idempotent_spooled_create_is_answered_once(gateway: Gateway) -> None:
    body = orjson.dumps({"requests": requests(N, prefix="i")})
    key = {"Idempotency-Key": uniq("mb-large")}
    first = post(gateway, body, key)
    assert first.status_code == 200, first.text
    before = written(gateway)
    again = post(gateway, body, key)
    assert (again.status_code, again.content) == (200, first.content)
    assert written(gateway) == before
    wait_ended(sdk(gateway), first.json()["id"], N, timeout=120)


def refusals() -> list[tuple[bytes, str]]:
    good = requests(N)
    return [
        (orjson.dumps({"requests": [*good, request("r7")]}), "requests[1100].custom_id: 'r7' is already"),
        (orjson.dumps({"requests": [*good, "last"]}), "requests[1100]: must be an object"),
        (orjson.dumps({"requests": [*good, request("s", stream=True)]}), "requests[1100].params.stream: "),
        (orjson.dumps({"requests": requests(MAX_ITEMS + 1)}), f"the limit is {MAX_ITEMS}"),
        (orjson.dumps({"requests": good})[:-3], "the body must be a JSON object with requests"),
        (orjson.dumps({"other": [PADDING] * 1_100}), "requests: field required"),
    ]


@pytest.mark.parametrize(
    ("body", "message"), refusals(), ids=["duplicate", "item", "stream", "count", "cut", "no-requests"]
)
def test_spooled_refusals_name_the_request_and_write_nothing(
    gateway: Gateway, body: bytes, message: str
) -> None:
    before = written(gateway)
    response = post(gateway, body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert message in error["error"]["message"], error
    time.sleep(0.2)  # a leftover would have been written before the answer; nothing may appear after it
    assert written(gateway) == before
