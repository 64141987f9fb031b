"""``RELAY_BATCH_PAYLOAD_STORE=database`` across replicas (SPEC §10.7), over HTTP against real ``relay
serve`` processes on one Postgres database and the real fake upstream.

- Two replicas with workers, each with a payload directory of its own (no shared volume): every item
  completes whichever replica claims it, results read identically through either, and nothing is
  written under either directory.
- A relay switched from ``files`` to ``database`` (the same process restarted with the setting
  changed): the batches submitted before keep their bodies in the directory, are still served with
  their responses, and their remaining items run; new batches go to the database.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from relay.store import tables as t
from relay.store.engine import create_engine
from tests.fixtures.databases import create_postgres_database, drop_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, uniq
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import chat_item, item_events, results, status, submit, wait_finished

DATABASE = {"RELAY_BATCH_PAYLOAD_STORE": "database"}


async def claimants(url: str, batch_id: str) -> set[str]:
    """Which replicas ran the batch's items (the database's record: ``claimed_by``)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            query = select(t.batch_items.c.claimed_by).where(t.batch_items.c.batch_id == batch_id).distinct()
            return {row[0] for row in await conn.execute(query)}
    finally:
        await engine.dispose()


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def sent_to_upstream(gw: Gateway, marker: str) -> list[str]:
    """The item contents the fake upstream received with ``user`` = ``marker``, in arrival order."""
    return [
        r["body"]["messages"][0]["content"]
        for r in gw.fake.requests(limit=500)
        if isinstance(r["body"], dict) and r["body"].get("user") == marker
    ]


def assert_echoed(rows: list[dict], idxs: list[int]) -> None:
    assert [r["idx"] for r in rows] == idxs
    for r in rows:
        assert r["state"] == "completed" and set(r) == {"idx", "state", "response"}, r
        assert r["response"]["choices"][0]["message"]["content"] == f"Echo: item {r['idx']}"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[tuple[Gateway, Gateway, Path, Path]]:
    root = tmp_path_factory.mktemp("db-store-replicas")
    url = create_postgres_database()
    dirs = root / "a-payloads", root / "b-payloads"
    processes = [
        RelayProcess(
            root / name, url, {**DATABASE, "RELAY_BATCH_PAYLOAD_DIR": str(d), "RELAY_INSTANCE_ID": name}
        )
        for name, d in zip(("replica-a", "replica-b"), dirs, strict=True)
    ]
    try:
        processes[0].start()  # migrates; the other starts once the schema is there
        processes[1].start()
        a = Gateway(processes[0], fake_upstream, "postgres", None)
        a.apply_catalog()
        b = Gateway(processes[1], fake_upstream, "postgres", None)
        b.key = a.key
        b.wait_until_known(a.key)
        yield a, b, dirs[0], dirs[1]
    finally:
        live_reaper.stop(processes, url)


def test_database_store_needs_no_shared_directory(pair: tuple[Gateway, Gateway, Path, Path]) -> None:
    a, b, a_dir, b_dir = pair
    n = 40  # more than one replica's 16 workers, each item slow enough for both replicas to claim
    marker = uniq("db-store")
    batch_id = submit(a, "openai", [chat_item(i, user=marker, fake={"latency_ms": 300}) for i in range(n)])
    view = wait_finished(b, batch_id)
    assert view["counts"] == {"completed": n}
    through_a, through_b = results(a, batch_id), results(b, batch_id, jsonl=True)
    assert through_a == through_b
    assert_echoed(through_a, list(range(n)))
    events = item_events(a, batch_id, n)
    assert all(e["error_kind"] is None and e["cost_nanos"] > 0 for e in events.values())
    assert sorted(sent_to_upstream(a, marker)) == sorted(f"item {i}" for i in range(n))  # each once
    # Both replicas ran items (neither could have read the other's directory) ...
    assert asyncio.run(claimants(a.relay.database_url, batch_id)) == {"replica-a", "replica-b"}
    # ... and nothing was written under either directory.
    assert files_under(a_dir) == [] and files_under(b_dir) == []


def test_a_relay_switched_to_the_database_store_keeps_serving_and_running_old_batches(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    url = create_postgres_database()
    payload_dir = tmp_path / "payloads"
    relay = RelayProcess(
        tmp_path / "relay",
        url,
        {
            "RELAY_BATCH_PAYLOAD_DIR": str(payload_dir),
            "RELAY_BATCH_WORKERS": "1",
            "RELAY_SHUTDOWN_GRACE_S": "20",
        },
    )
    marker = uniq("switch")
    try:
        relay.start()
        gw = Gateway(relay, fake_upstream, "postgres", None)
        gw.apply_catalog()
        # Under ``files``: one batch finishes, another is stopped after its first item.
        done = submit(gw, "openai", [chat_item(i, user=marker) for i in range(2)])
        wait_finished(gw, done)
        slow = {"latency_ms": 1500}
        half = submit(gw, "openai", [chat_item(i, user=marker, fake=slow) for i in range(3)])
        deadline = time.monotonic() + 20
        while status(gw, half)["counts"].get("running", 0) < 1:
            assert time.monotonic() < deadline, status(gw, half)
            time.sleep(0.05)
        assert relay.stop(signal.SIGTERM) == 0  # item 0 finishes within the grace, the rest go back
        files_before = files_under(payload_dir)
        assert {p.parent.name for p in files_before} == {done, half}

        relay.env.update(DATABASE)
        relay.start()
        view = wait_finished(gw, half)
        assert view["counts"] == {"completed": 3}
        assert_echoed(results(gw, done), [0, 1])
        assert_echoed(results(gw, half), [0, 1, 2])
        # A new batch lives in the database: no new directory under the payload directory.
        new = submit(gw, "openai", [chat_item(i, user=marker) for i in range(2)])
        wait_finished(gw, new)
        assert_echoed(results(gw, new), [0, 1])
        assert {p.parent.name for p in files_under(payload_dir)} == {done, half}
        assert sorted(sent_to_upstream(gw, marker)) == sorted(f"item {i}" for i in (0, 1, 0, 1, 2, 0, 1))
    finally:
        relay.close()
        drop_postgres_database(url)
