"""Cancel across replicas (SPEC §10.5): the waiting items are cancelled at once whichever replica gets
the call; an item running on the replica that receives the cancel is stopped and ends ``cancelled``; an
item running on another replica finishes. Two ``relay serve`` processes on one database: ``front``
runs no items, ``worker`` runs 4 at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.batches_api.helpers import chat_item, status, submit, wait_events, wait_finished
from tests.fixtures.databases import create_postgres_database, drop_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import RelayProcess

WORKERS = 4


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


def running(gw: Gateway, batch_id: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while status(gw, batch_id)["counts"].get("running", 0) < count:
        assert time.monotonic() < deadline, status(gw, batch_id)["counts"]
        time.sleep(0.05)


@pytest.mark.parametrize("where", ["elsewhere", "here"])
def test_cancel(pair: tuple[Gateway, Gateway], where: str) -> None:
    front, worker = pair
    n = 12
    latency = 1500 if where == "elsewhere" else 20_000
    batch_id = submit(front, "openai", [chat_item(i, fake={"latency_ms": latency}) for i in range(n)])
    running(front, batch_id, 2 * WORKERS)  # 4 run, 4 more claimed ahead (also ``running``)
    receiver = front if where == "elsewhere" else worker
    response = receiver.post(f"/v1/batches/{batch_id}/cancel")
    assert response.status_code == 200 and response.json() == {"status": "cancelled"}
    counts = status(front, batch_id)["counts"]
    assert counts["cancelled"] >= n - 2 * WORKERS, counts  # the available ones at once
    view = wait_finished(front, batch_id, timeout=30)
    assert view["Status"] == "cancelled"
    if where == "elsewhere":
        # What the other replica runs (or has claimed) finishes.
        assert view["counts"] == {"cancelled": n - 2 * WORKERS, "completed": 2 * WORKERS}
    else:
        assert view["counts"] == {"cancelled": n}  # stopped long before their 20 s answer
    events = wait_events(front, batch_id, n)
    assert sorted(e["batch_idx"] for e in events) == list(range(n))
    states = {item["idx"]: item["state"] for item in view["items"]}
    for event in events:
        cancelled = states[event["batch_idx"]] == "cancelled"
        assert (event["error_kind"] == "cancelled") == cancelled
        assert (event["cost_nanos"] is None) == cancelled
