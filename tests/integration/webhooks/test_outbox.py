"""The outbox and its claims at the store level, on SQLite and Postgres (SPEC §10.10): events are written
in the caller's transaction (a rollback leaves none), at most one per webhook and batch, filtered by
project, event type and ``enabled``; concurrent claims take disjoint events; a claim whose lease ran out
is taken again, and the late claimant then records nothing (each attempt recorded once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.crypto.sealing import SecretBox
from relay.domain.ids import mint_id
from relay.store import tables as t
from relay.store import webhooks as store
from relay.store.catalog import utcnow
from relay.store.engine import create_engine
from relay.webhooks import outbox

BOX = SecretBox(bytes(32))


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(migrated_url)
    async with engine.begin() as conn:
        for table in (t.webhook_deliveries, t.webhook_events, t.webhooks, t.projects, t.teams):
            await conn.execute(delete(table))
    try:
        yield engine
    finally:
        await engine.dispose()


async def project(engine: AsyncEngine) -> str:
    now = utcnow()
    team, project_id = mint_id("tm"), mint_id("prj")
    async with engine.begin() as conn:
        await conn.execute(insert(t.teams).values(id=team, name=team[-12:], created_at=now, updated_at=now))
        await conn.execute(
            insert(t.projects).values(
                id=project_id, name=project_id[-12:], team_id=team, created_at=now, updated_at=now
            )
        )
    return project_id


async def webhook(engine: AsyncEngine, project_id: str | None = None, **columns: Any) -> str:
    now, webhook_id = utcnow(), mint_id("wh")
    values = {
        "id": webhook_id,
        "name": webhook_id[-12:],
        "created_at": now,
        "updated_at": now,
        "project_id": project_id,
        "url": "http://127.0.0.1:9/hook",
        "secret_encrypted": BOX.seal("whsec_" + "A" * 44, bound_to=webhook_id),
        "events": ["batch.completed", "batch.cancelled"],
        "enabled": True,
        **columns,
    }
    async with engine.begin() as conn:
        await conn.execute(insert(t.webhooks).values(**values))
    return webhook_id


async def enqueue(
    engine: AsyncEngine, batch_id: str, project_id: str, event_type: str = "batch.completed"
) -> int:
    async with engine.begin() as conn:
        return await outbox.enqueue(
            conn,
            batch_id=batch_id,
            api="relay",
            project_id=project_id,
            counts={"completed": 2},
            event_type=event_type,
        )


async def events(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [
            dict(r._mapping)
            for r in await conn.execute(select(t.webhook_events).order_by(t.webhook_events.c.id))
        ]


async def test_enqueue_filters_and_writes_at_most_one_event_per_batch(engine: AsyncEngine) -> None:
    mine, other = await project(engine), await project(engine)
    everyone = await webhook(engine)
    scoped = await webhook(engine, mine)
    await webhook(engine, other)  # another project's
    await webhook(engine, mine, enabled=False)
    await webhook(engine, mine, events=["batch.failed"])  # another event type
    assert await enqueue(engine, "b_1", mine) == 2
    assert await enqueue(engine, "b_1", mine) == 0  # reported finished again: nothing more
    rows = await events(engine)
    assert sorted(r["webhook_id"] for r in rows) == sorted([everyone, scoped])
    for row in rows:
        body = orjson.loads(row["body"])
        assert body == {
            "id": row["id"],
            "type": "batch.completed",
            "created_at": body["created_at"],
            "data": {"id": "b_1", "api": "relay", "project_id": mine, "counts": {"completed": 2}},
        }
        assert row["state"] == "pending" and row["attempts"] == 0 and row["next_attempt_at"] is not None
    assert len({r["id"] for r in rows}) == 2
    with pytest.raises(ValueError, match="unknown webhook event type"):
        await enqueue(engine, "b_2", mine, "batch.done")


async def test_a_rolled_back_finish_leaves_no_event(engine: AsyncEngine) -> None:
    await webhook(engine)
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await outbox.enqueue(
                conn,
                batch_id="b_x",
                api="openai",
                project_id="prj_x",
                counts={},
                event_type="batch.cancelled",
            )
            raise RuntimeError("the finishing transaction fails")
    assert await events(engine) == []


async def test_concurrent_claims_take_disjoint_events(engine: AsyncEngine, migrated_url: str) -> None:
    await webhook(engine)
    for n in range(12):
        await enqueue(engine, f"b_{n}", "prj_any")
    others = [create_engine(migrated_url) for _ in range(3)]
    try:
        claims = await asyncio.gather(
            *(store.claim_due(e, f"r{i}", f"tok{i}", limit=5, lease_s=30) for i, e in enumerate(others))
        )
    finally:
        for other in others:
            await other.dispose()
    ids = [event.id for claim in claims for event in claim]
    assert len(ids) == 12 and len(set(ids)) == 12  # every event once, none twice
    assert await store.claim_due(engine, "r9", "tok9", limit=5, lease_s=30) == []  # all leased


async def test_a_lapsed_claim_is_taken_again_and_its_late_attempt_not_recorded(engine: AsyncEngine) -> None:
    await webhook(engine)
    await enqueue(engine, "b_1", "prj_any")
    [first] = await store.claim_due(engine, "r1", "tok1", limit=5, lease_s=30)
    async with engine.begin() as conn:  # the lease runs out (the replica died or stalled)
        await conn.execute(update(t.webhook_events).values(next_attempt_at=utcnow()))
    [second] = await store.claim_due(engine, "r2", "tok2", limit=5, lease_s=30)
    assert second.id == first.id and second.attempts == 0

    def outcome(delivery: str) -> store.Attempt:
        return store.Attempt(delivery, 200, 5, None, "delivered", None)

    assert await store.finish_attempt(engine, second, outcome(mint_id("whd"))) is True
    assert await store.finish_attempt(engine, first, outcome(mint_id("whd"))) is False  # late: not its claim
    assert await store.finish_attempt(engine, second, outcome(mint_id("whd"))) is False  # once only
    [row] = await events(engine)
    assert row["state"] == "delivered" and row["attempts"] == 1 and row["next_attempt_at"] is None
    async with engine.connect() as conn:
        recorded = (await conn.execute(select(t.webhook_deliveries))).all()
    assert len(recorded) == 1 and recorded[0].attempt == 1
    assert await store.claim_due(engine, "r3", "tok3", limit=5, lease_s=30) == []  # delivered: never again
    assert await store.pending_summary(engine) == (0, None)


async def test_expired_pending_events_are_failed_whatever_enabled_says_but_not_while_claimed(
    engine: AsyncEngine,
) -> None:
    on, off = await webhook(engine), await webhook(engine)
    await enqueue(engine, "b_1", "prj_any")  # one event for each webhook
    async with engine.begin() as conn:
        await conn.execute(update(t.webhooks).where(t.webhooks.c.id == off).values(enabled=False))
    [claimed] = await store.claim_due(engine, "r1", "tok1", limit=5, lease_s=30)
    assert claimed.webhook_id == on  # the disabled webhook's event is never claimed
    count, oldest = await store.pending_summary(engine)
    assert count == 1 and oldest is not None  # the gauges leave the disabled webhook's event out
    assert await store.fail_expired(engine, 3600) == 0  # neither is an hour old
    async with engine.begin() as conn:  # both were created two hours ago
        await conn.execute(update(t.webhook_events).values(created_at=utcnow() - timedelta(hours=2)))
    assert await store.fail_expired(engine, 3600) == 1  # the claimed one is left to its attempt
    by_webhook = {row["webhook_id"]: row for row in await events(engine)}
    assert by_webhook[off]["state"] == "failed" and by_webhook[off]["next_attempt_at"] is None
    assert by_webhook[off]["finished_at"] is not None and by_webhook[off]["attempts"] == 0
    assert by_webhook[on]["state"] == "pending"
    async with engine.begin() as conn:  # its lease runs out unrecorded (the replica died)
        pending = t.webhook_events.c.state == "pending"
        await conn.execute(update(t.webhook_events).where(pending).values(next_attempt_at=utcnow()))
    assert await store.fail_expired(engine, 3600) == 1
    assert {row["state"] for row in await events(engine)} == {"failed"}
    assert await store.pending_summary(engine) == (0, None)
    assert await store.fail_expired(engine, 3600) == 0
