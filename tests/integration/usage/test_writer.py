"""The background writer on real databases: batching, full queues, refused rows, outages, shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import event as sa_event
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from relay.store import tables as t
from relay.store import usage_flush
from relay.store.driver import driver_connection
from relay.store.engine import create_engine
from relay.usage.capture import PayloadRecord
from relay.usage.event import UsageEvent
from relay.usage.writer import UsageWriter
from tests.fixtures.databases import ADMIN_URL
from tests.fixtures.databases import migrate_database as migrate
from tests.integration.usage.helpers import make_event


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def stored(engine: AsyncEngine, table: t.Table = t.usage_events) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def payload_for(event: UsageEvent, body: bytes = b'{"messages": []}') -> PayloadRecord:
    return PayloadRecord(
        request_id=event.request_id, ts=datetime.now(UTC), request_body=body, response_body=b"data: {}\n\n"
    )


async def test_everything_recorded_is_stored_in_few_transactions(engine: AsyncEngine) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, batch_size=500)
    events = [make_event() for _ in range(1200)]
    for i, event in enumerate(events):
        writer.record(event, payload_for(event) if i % 100 == 0 else None)
    assert sample(registry, "relay_usage_queue_depth") == 1200
    await writer.start()
    await writer.stop()
    assert await stored(engine) == 1200 and await stored(engine, t.payloads) == 12
    assert sample(registry, "relay_usage_events_written_total") == 1200
    assert sample(registry, "relay_usage_write_transactions_total") == 3  # 500 + 500 + 200
    assert sample(registry, "relay_usage_queue_depth") == 0


async def test_an_idle_writer_sleeps_until_an_event_arrives_then_gathers_an_interval(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing queued the drain task makes no pass at every interval (an idle relay is not woken
    20 times a second); the first event wakes it, and the events recorded within the interval after
    it go in the same transaction."""
    passes: list[int] = []
    write_pass = UsageWriter._write_pass

    async def counted(self: UsageWriter) -> object:
        passes.append(len(self._queue))
        return await write_pass(self)

    monkeypatch.setattr(UsageWriter, "_write_pass", counted)
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, flush_interval_s=0.02)
    await writer.start()
    try:
        await eventually(lambda: len(passes) >= 1)
        await asyncio.sleep(0.3)  # fifteen intervals with nothing queued
        assert passes == [0]  # one pass found the queue empty; none since
        writer.record(make_event())
        await asyncio.sleep(0)  # the drain task wakes, and waits an interval for more
        for _ in range(4):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 5)
        assert sample(registry, "relay_usage_write_transactions_total") == 1
        await eventually(lambda: passes[-1] == 0)  # quiet again after the flush
        quiet = len(passes)
        await asyncio.sleep(0.2)
        assert len(passes) == quiet
    finally:
        await writer.stop()
    assert await stored(engine) == 5


async def test_a_running_writer_flushes_within_its_interval(engine: AsyncEngine) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, flush_interval_s=0.05)
    await writer.start()
    try:
        for _ in range(3):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 3, within=2)
        assert await stored(engine) == 3
    finally:
        await writer.stop()


async def test_events_arriving_during_a_write_wait_for_the_next_interval(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events arriving while a write is in flight wait for the next interval: writing them at once
    chained one small transaction after another under steady load (a transaction per 2–8 events at
    500 req/s, ≈ 1.4 ms of CPU each on SQLite). 3 events arrive inside the first write's transaction and
    2 more once it has committed: waiting, the writer takes all 5 in its second transaction; chaining,
    it would have sent the 3 on at once and the 2 in a third. Counted, not timed: the 2 are recorded
    within a poll of the commit, far inside the 2 s interval."""
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, flush_interval_s=2.0)
    loop = asyncio.get_running_loop()
    inserts: list[int] = []

    def arrive(count: int) -> None:
        inserts.append(count)
        if len(inserts) == 1:  # inside the first write's transaction
            for _ in range(3):
                writer.record(make_event())

    def arrive_meanwhile(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO USAGE_EVENTS"):
            arrive(len(parameters))

    # Postgres: SQLAlchemy runs the flush's statements. SQLite: the flush's transaction runs whole on
    # aiosqlite's thread (relay.store.usage_flush), which hands the arrival to the event loop ahead of
    # the flush's own answer, as a request answered meanwhile would be.
    original = usage_flush._transaction

    def transaction_meanwhile(db: Any, statements: Any) -> None:
        loop.call_soon_threadsafe(arrive, len(statements[0][1]))
        original(db, statements)

    sqlite = engine.dialect.name == "sqlite"
    if sqlite:
        monkeypatch.setattr(usage_flush, "_transaction", transaction_meanwhile)
    else:
        sa_event.listen(engine.sync_engine, "before_cursor_execute", arrive_meanwhile)
    await writer.start()
    try:
        for _ in range(10):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 10, within=30)
        for _ in range(2):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 15, within=30)
        assert inserts == [10, 5]
    finally:
        await writer.stop()
        if not sqlite:
            sa_event.remove(engine.sync_engine, "before_cursor_execute", arrive_meanwhile)
    assert await stored(engine) == 15


async def test_flushes_share_one_kept_connection_until_it_fails(sqlite_engine: AsyncEngine) -> None:
    """A checkout (and its reset on return) per flush cost more than a small flush's rows: the writer
    keeps one connection between flushes, and lets it go when a write fails (an outage)."""
    checkouts: list[object] = []

    def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        checkouts.append(dbapi_connection)

    sa_event.listen(sqlite_engine.sync_engine, "checkout", checked_out)
    registry = CollectorRegistry()
    writer = UsageWriter(
        sqlite_engine, registry, flush_interval_s=0.02, retry_initial_s=0.02, retry_max_s=0.05
    )
    await writer.start()
    try:
        for written in (1, 2, 3):
            writer.record(make_event())
            await eventually(lambda n=written: sample(registry, "relay_usage_events_written_total") == n)
        assert sample(registry, "relay_usage_write_transactions_total") == 3 and len(checkouts) == 1
        await hide_table(sqlite_engine, True)
        checkouts.clear()
        writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_write_errors_total") >= 2)
        await hide_table(sqlite_engine, False)
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 4)
        assert len(checkouts) >= 3  # the table shown again, and a new connection after each failure
    finally:
        await writer.stop()
        sa_event.remove(sqlite_engine.sync_engine, "checkout", checked_out)
    assert await stored(sqlite_engine) == 4


async def test_a_kept_connection_closed_under_the_writer_loses_nothing(engine: AsyncEngine) -> None:
    """The connection kept between flushes can end under the writer (a database restart, a driver
    thread gone): the next flush fails as an outage and is written on a new connection, never dropped
    as refused."""
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, flush_interval_s=0.02, retry_initial_s=0.02, retry_max_s=0.05)
    await writer.start()
    try:
        writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 1)
        kept = writer._connection
        assert kept is not None
        await (await driver_connection(kept)).close()
        for _ in range(3):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 4)
        assert sample(registry, "relay_usage_write_errors_total") >= 1
        assert sample(registry, "relay_usage_events_dropped_total", reason="refused") == 0
        assert writer._connection is not kept
    finally:
        await writer.stop()
    assert await stored(engine) == 4


async def test_a_full_queue_drops_counts_and_says_so(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, queue_size=2)  # not started: nothing drains the queue
    with caplog.at_level(logging.WARNING, logger="relay.usage"):
        for _ in range(50):
            writer.record(make_event())
        assert sample(registry, "relay_usage_events_dropped_total", reason="queue_full") == 48
        assert writer.queue_depth == 2
        # Rate-limited: the first drop is reported at once, the other 47 wait for the next report…
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["usage data lost since the last report: 1 events dropped (queue full)"]
        await writer.stop()  # …which stop() makes, so no loss goes unreported
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[-1] == "usage data lost since the last report: 47 events dropped (queue full)"
    assert await stored(engine) == 2
    writer.record(make_event())
    assert sample(registry, "relay_usage_events_dropped_total", reason="stopped") == 1


async def test_payloads_over_the_memory_budget_are_dropped_but_their_events_kept(engine: AsyncEngine) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, payload_budget_bytes=100)
    small, big = make_event(), make_event()
    writer.record(small, payload_for(small))
    writer.record(big, payload_for(big, b"x" * 200))
    await writer.stop()
    assert await stored(engine) == 2 and await stored(engine, t.payloads) == 1
    assert sample(registry, "relay_usage_payloads_dropped_total", reason="budget") == 1


async def test_a_row_the_database_refuses_does_not_block_the_others(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry)
    first = make_event()
    writer.record(first)
    await writer.stop()
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry)
    duplicate_id = make_event(id=first.id)
    duplicate_payload = make_event(request_id=first.request_id)
    out_of_range = make_event(latency_ms=2**70)  # not a 32-bit integer on Postgres, not even 64 on SQLite
    # No UTF-8 encoder writes a lone surrogate; Postgres text holds no NUL (the edge refuses the first,
    # SPEC §1; the writer must survive both anyway, SPEC §8).
    unencodable = [make_event(model="\ud800"), make_event(error_message="nul \x00 byte")]
    others = [make_event() for _ in range(3)]
    writer.record(others[0])
    writer.record(duplicate_id)
    writer.record(out_of_range)
    for event in unencodable:
        writer.record(event)
    writer.record(others[1])
    writer.record(duplicate_payload, payload_for(duplicate_payload))
    writer.record(others[2], payload_for(others[2]))
    async with engine.begin() as conn:  # a payload already stored under that request id
        await conn.execute(t.payloads.insert().values(**payload_for(first).to_row()))
    await writer.stop()
    # first + 3 others + duplicate_payload's event (without its payload) [+ the NUL row on SQLite]
    nul_stored = 1 if engine.dialect.name == "sqlite" else 0
    assert await stored(engine) == 5 + nul_stored
    assert await stored(engine, t.payloads) == 2
    assert sample(registry, "relay_usage_events_dropped_total", reason="refused") == 4 - nul_stored
    assert sample(registry, "relay_usage_payloads_dropped_total", reason="refused") == 1
    assert sample(registry, "relay_usage_events_written_total") == 4 + nul_stored
    assert any(duplicate_id.id in r.getMessage() for r in caplog.records)


@pytest.fixture
async def outage_postgres(postgres_url: str) -> AsyncIterator[tuple[str, Callable[[bool], object]]]:
    """A migrated Postgres database and a switch that makes it refuse (and drop) every connection."""
    await migrate(postgres_url)
    name = make_url(postgres_url).database
    admin = create_async_engine(
        make_url(ADMIN_URL).set(drivername="postgresql+asyncpg"), isolation_level="AUTOCOMMIT"
    )

    async def accept(allowed: bool) -> None:
        async with admin.connect() as conn:
            await conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}'))
            if not allowed:
                await conn.execute(
                    text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                    {"n": name},
                )

    try:
        yield postgres_url, accept
    finally:
        await accept(True)
        await admin.dispose()


async def test_postgres_outage_keeps_events_queued_until_it_is_back(
    outage_postgres: tuple[str, Callable[[bool], object]], caplog: pytest.LogCaptureFixture
) -> None:
    url, accept = outage_postgres
    engine = create_engine(url)
    registry = CollectorRegistry()
    writer = UsageWriter(engine, registry, flush_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2)
    try:
        await writer.start()
        writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 1)
        await accept(False)  # type: ignore[misc]
        for _ in range(20):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_write_errors_total") >= 3)
        assert writer.queue_depth == 20 and sample(registry, "relay_usage_events_written_total") == 1
        assert any("cannot be written yet" in r.getMessage() for r in caplog.records)
        await accept(True)  # type: ignore[misc]
        await eventually(lambda: sample(registry, "relay_usage_events_written_total") == 21)
        assert await stored(engine) == 21
        assert sample(registry, "relay_usage_events_dropped_total", reason="queue_full") == 0
    finally:
        await writer.stop()
        await engine.dispose()


@pytest.fixture
async def sqlite_engine(tmp_path: object) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite:///{tmp_path}/relay.db"
    await migrate(url)
    engine = create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def hide_table(engine: AsyncEngine, hidden: bool) -> None:
    """Make the events table unavailable on SQLite (every insert fails with "no such table")."""
    names = ("usage_events", "usage_events_away")
    old, new = names if hidden else names[::-1]
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE {old} RENAME TO {new}"))


async def test_sqlite_table_unavailable_then_back(sqlite_engine: AsyncEngine) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(
        sqlite_engine, registry, flush_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.1
    )
    await hide_table(sqlite_engine, True)
    await writer.start()
    try:
        for _ in range(5):
            writer.record(make_event())
        await eventually(lambda: sample(registry, "relay_usage_write_errors_total") >= 2)
        assert writer.queue_depth == 5
        await hide_table(sqlite_engine, False)
        await eventually(lambda: writer.queue_depth == 0)
        assert await stored(sqlite_engine) == 5
    finally:
        await writer.stop()


async def test_stop_gives_up_after_its_timeout_and_counts_what_it_lost(
    sqlite_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    writer = UsageWriter(sqlite_engine, registry, stop_timeout_s=0.3, retry_initial_s=0.05, retry_max_s=0.1)
    await hide_table(sqlite_engine, True)
    for _ in range(4):
        writer.record(make_event())
    await asyncio.wait_for(writer.stop(), 30)  # gives up after 0.3 s: the bound only fails a hang
    assert sample(registry, "relay_usage_events_dropped_total", reason="shutdown") == 4
    assert "4 events not written before the stop timeout" in caplog.records[-1].getMessage()
