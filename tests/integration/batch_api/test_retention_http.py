"""Retention through a real ``relay serve`` (SPEC §17), on SQLite and Postgres: ``DELETE /api/batches/{id}``
(admin; any API's id) answers 204, 404 for an unknown id and 409 ``batch_not_finished`` while an item is
not final; the sweep of a relay started with ``RELAY_BATCH_RETENTION_DAYS`` deletes a batch finished
longer ago than that, logs its counts and counts them in ``relay_retention_deleted_total``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from relay.store import tables as t
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.gateway import metric_value
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, start_gateway
from tests.integration.batch_api.helpers import chat_item, status, submit, wait_finished

RETENTION_ENV = {**GATEWAY_ENV, "RELAY_BATCH_RETENTION_DAYS": "2", "RELAY_RETENTION_SWEEP_S": "1"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def kept_gw(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir: Path = tmp_path_factory.mktemp(f"retention-{request.param}")
    yield from start_gateway(request.param, workdir, fake_upstream, live_reaper, RETENTION_ENV)


def batch_of_admin(gw: Gateway, batch_id: str) -> httpx.Response:
    return gw.relay.control.get(f"/api/batches/{batch_id}")


def test_delete_answers_204_404_and_409_batch_not_finished(kept_gw: Gateway) -> None:
    gw = kept_gw
    slow = submit(gw, "openai", [chat_item(i, fake={"latency_ms": 300}) for i in range(40)])
    refused = gw.relay.control.delete(f"/api/batches/{slow}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "batch_not_finished"
    assert status(gw, slow)["TotalItems"] == 40  # untouched
    assert gw.relay.control.post(f"/api/batches/{slow}/cancel").status_code == 200

    idempotent = {"shape": "openai", "requests": [chat_item(0), chat_item(1)]}
    key = {**gw.auth(None), "Idempotency-Key": f"retention-{slow}"}
    created = gw.post("/v1/batches", idempotent, headers=key)
    assert created.status_code == 202, created.text
    done = created.json()["id"]
    wait_finished(gw, done)
    wait_finished(gw, slow)
    for batch_id in (done, slow):
        response = gw.relay.control.delete(f"/api/batches/{batch_id}")
        assert response.status_code == 204 and response.content == b"", response.text
        assert batch_of_admin(gw, batch_id).status_code == 404
        assert gw.client.get(f"/v1/batches/{batch_id}", headers=gw.auth(None)).status_code == 404
    events = gw.relay.control.get("/api/usage/events", params={"batch_id": done}).json()["events"]
    assert len(events) == 2  # usage events are the record of what ran: kept
    again = gw.post("/v1/batches", idempotent, headers=key)  # its idempotency row went with it
    assert again.status_code == 202 and again.json()["id"] != done, again.text
    missing = gw.relay.control.delete(f"/api/batches/{done}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    anonymous = httpx.delete(f"{gw.relay.control_url}/api/batches/{done}", timeout=10)
    assert anonymous.status_code == 401


def test_the_sweep_deletes_a_batch_finished_longer_ago_than_the_retention(kept_gw: Gateway) -> None:
    gw = kept_gw
    before = metric_value(gw.metrics(), "relay_retention_deleted_total", what="batches")
    old, young = (submit(gw, "openai", [chat_item(i) for i in range(3)]) for _ in range(2))
    for batch_id in (old, young):
        wait_finished(gw, batch_id)
    long_ago = datetime.now(UTC) - timedelta(days=3)
    gw.sql(update(t.batches).where(t.batches.c.id == old).values(completed_at=long_ago))

    deadline = time.monotonic() + 60
    while batch_of_admin(gw, old).status_code != 404:
        assert time.monotonic() < deadline, "the sweep never deleted the old batch"
        time.sleep(0.2)
    assert batch_of_admin(gw, young).status_code == 200  # finished now: kept for 2 days

    def swept() -> list[str]:
        messages = [str(r.get("message", "")) for r in gw.log_records()]
        return [m for m in messages if m.startswith("retention sweep deleted 1 batches, 3 items")]

    while not swept():  # the sweep's line comes once the whole sweep is done
        assert time.monotonic() < deadline, "no sweep logged its counts"
        time.sleep(0.2)
    assert metric_value(gw.metrics(), "relay_retention_deleted_total", what="batches") >= before + 1
    assert metric_value(gw.metrics(), "relay_retention_deleted_total", what="items") >= 3
