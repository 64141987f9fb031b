"""Cancel across replicas (SPEC §10.2, §10.5): the waiting items — those a replica reserved ahead of its
workers included — are cancelled at once whichever replica gets the call, and never start after it
answered; an item running on the replica that receives the cancel is stopped and ends ``cancelled``; an
item running on another replica finishes. Two ``relay serve`` processes on one database: ``front``
runs no items, ``worker`` runs one at a time (and reserves more ahead of it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fixtures.databases import create_postgres_database, drop_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import chat_item, results, status, submit, wait_events, wait_finished

WORKERS = 1


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream
) -> Iterator[tuple[Gateway, Gateway]]:
    root = tmp_path_factory.mktemp(f"cancel-{request.param}")
    url = f"sqlite:///{root / 'relay.db'}" if request.param == "sqlite" else create_postgres_database()
    env = {"RELAY_BATCH_PAYLOAD_DIR": str(root / "payloads")}
    front = RelayProcess(root / "front", url, {**env, "RELAY_BATCH_WORKERS": "0"})
    worker = RelayProcess(root / "worker", url, {**env, "RELAY_BATCH_WORKERS": str(WORKERS)})
    try:
        front.start()  # migrates; the worker starts once the schema is there
        worker.start()
        gw_front = Gateway(front, fake_upstream, request.param, None)
        gw_front.apply_catalog()
        gw_worker = Gateway(worker, fake_upstream, request.param, None)
        gw_worker.key = gw_front.key
        gw_worker.wait_until_known(gw_front.key)
        yield gw_front, gw_worker
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(RelayProcess.close, (front, worker)))
        if request.param == "postgres":
            drop_postgres_database(url)


def running(gw: Gateway, batch_id: str, count: int) -> dict[str, int]:
    """Wait until ``count`` items run; the counts then. ``running`` means executing now (§10.2): never
    more than the worker replica's slots, however many items it reserved ahead."""
    deadline = time.monotonic() + 20
    while (counts := status(gw, batch_id)["counts"]).get("running", 0) < count:
        assert time.monotonic() < deadline, counts
        time.sleep(0.05)
    assert counts["running"] == count, counts
    return dict(counts)


@pytest.mark.parametrize("where", ["elsewhere", "here"])
def test_cancel(pair: tuple[Gateway, Gateway], where: str) -> None:
    front, worker = pair
    n = 12
    latency = 1500 if where == "elsewhere" else 20_000
    batch_id = submit(front, "openai", [chat_item(i, fake={"latency_ms": latency}) for i in range(n)])
    assert running(front, batch_id, WORKERS) == {"available": n - WORKERS, "running": WORKERS}
    receiver = front if where == "elsewhere" else worker
    response = receiver.post(f"/v1/batches/{batch_id}/cancel")
    assert response.status_code == 200 and response.json() == {"status": "cancelled"}
    counts = status(front, batch_id)["counts"]
    assert counts["cancelled"] >= n - WORKERS, counts  # every waiting one (reserved or not) at once
    view = wait_finished(front, batch_id, timeout=30)
    assert view["Status"] == "cancelled"
    if where == "elsewhere":
        # Only what the other replica was executing finishes; what it had reserved is cancelled.
        assert view["counts"] == {"cancelled": n - WORKERS, "completed": WORKERS}
    else:
        assert view["counts"] == {"cancelled": n}  # stopped long before their 20 s answer
    events = wait_events(front, batch_id, n)
    assert sorted(e["batch_idx"] for e in events) == list(range(n))
    states = {item["idx"]: item["state"] for item in view["items"]}
    for event in events:
        cancelled = states[event["batch_idx"]] == "cancelled"
        assert (event["error_kind"] == "cancelled") == cancelled
        assert (event["cost_nanos"] is None) == cancelled


def test_reserved_items_never_reach_the_upstream_after_a_cancel_elsewhere(
    pair: tuple[Gateway, Gateway],
) -> None:
    """The scenario of issue 15: 3 slow items, the worker replica runs item 0 and has reserved more;
    a cancel on the other replica cancels items 1 and 2 — ``available`` until then, never ``running``
    — and neither reaches the upstream, then or later; item 0 finishes."""
    front, worker = pair
    marker = f"reserved-{uuid.uuid4().hex[:10]}"
    batch_id = submit(
        front, "openai", [chat_item(i, user=marker, fake={"latency_ms": 2500}) for i in range(3)]
    )
    assert running(front, batch_id, 1) == {"available": 2, "running": 1}
    assert [i["state"] for i in status(worker, batch_id)["items"]] == ["running", "available", "available"]
    response = front.post(f"/v1/batches/{batch_id}/cancel")
    assert response.status_code == 200 and response.json() == {"status": "cancelled"}
    answered = time.time()
    assert status(worker, batch_id)["counts"] == {"cancelled": 2, "running": 1}
    view = wait_finished(worker, batch_id, timeout=30)
    assert [i["state"] for i in view["items"]] == ["completed", "cancelled", "cancelled"]
    assert [r.get("error") for r in results(worker, batch_id)] == [None, "cancelled", "cancelled"]
    time.sleep(1.0)  # would a reserved item still be started, it would have reached the upstream by now
    sent = [
        r
        for r in front.fake.requests(limit=500)
        if isinstance(r["body"], dict) and r["body"].get("user") == marker
    ]
    assert [r["body"]["messages"][0]["content"] for r in sent] == ["item 0"], sent
    assert all(r["ts"] < answered for r in sent)
