"""The batch rows of provider batch offload (SPEC §22) on real SQLite and Postgres: an offloaded
batch's items are never claimed by Relay's workers, a refusal gives them back with its reason, and
each due poll goes to exactly one of several replicas, again only once ``every_s`` has passed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import offload_batches as offload
from relay.store import tables as t
from tests.integration.batches.queue_helpers import claim_run, submit


async def offload_row(engine: AsyncEngine, batch_id: str) -> dict[str, object]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(t.batches).where(t.batches.c.id == batch_id))).mappings().one()
    return {k: v for k, v in row.items() if k.startswith("offload_")}


async def test_an_offloaded_batch_is_not_claimed_until_a_refusal_gives_it_back(engine: AsyncEngine) -> None:
    offloaded, gateway = await submit(engine, 3), await submit(engine, 2)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        assert await offload.mark_offloaded(
            conn, offloaded, binding_id="bnd_1", provider_batch_id=None, state="submitting", now=now
        )
    claimed = await claim_run(engine, "r1", 10)
    assert {c.batch_id for c in claimed} == {gateway}  # the provider runs the other one

    async with engine.begin() as conn:
        assert await offload.run_on_gateway(conn, offloaded, "upstream returned 400: batch refused")
    row = await offload_row(engine, offloaded)
    assert row["offload_state"] is None and row["offload_batch_id"] is None
    assert row["offload_binding_id"] == "bnd_1"
    assert row["offload_reason"] == "upstream returned 400: batch refused"
    assert [c.idx for c in await claim_run(engine, "r1", 10)] == [0, 1, 2]


async def test_each_due_poll_goes_to_one_replica_and_comes_back_after_every_s(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    batches = [await submit(engine, 1) for _ in range(6)]
    gateway = await submit(engine, 1)
    start = datetime.now(UTC)
    async with engine.begin() as conn:
        for n, batch_id in enumerate(batches):
            await offload.mark_offloaded(
                conn,
                batch_id,
                binding_id="bnd_1",
                provider_batch_id=f"batch_{n}",
                state="validating",
                now=start,
            )
    assert await offload.due_for_poll(engine, every_s=30, now=start, limit=10) == []  # just marked

    later = start + timedelta(seconds=31)
    rounds = await asyncio.gather(
        *(offload.due_for_poll(e, every_s=30, now=later, limit=10) for e in [engine, *replica_engines])
    )
    polled = [b.id for claimed in rounds for b in claimed]
    assert sorted(polled) == sorted(batches)  # every due batch once, none twice, never the gateway's
    assert gateway not in polled
    first = next(b for claimed in rounds for b in claimed if b.id == batches[0])
    assert (first.binding_id, first.provider_batch_id, first.state, first.cancel_requested) == (
        "bnd_1",
        "batch_0",
        "validating",
        False,
    )
    assert await offload.due_for_poll(engine, every_s=30, now=later + timedelta(seconds=5), limit=10) == []

    async with engine.begin() as conn:
        await offload.set_provider_state(conn, batches[1], "in_progress")
        await conn.execute(
            update(t.batches).where(t.batches.c.id == batches[0]).values(completed_at=datetime.now(UTC))
        )
    again = await offload.due_for_poll(engine, every_s=30, now=later + timedelta(seconds=31), limit=10)
    assert sorted(b.id for b in again) == sorted(batches[1:])  # a finished batch is never polled
    assert next(b for b in again if b.id == batches[1]).state == "in_progress"
    async with engine.begin() as conn:  # a finished batch is no longer marked or given back
        assert not await offload.run_on_gateway(conn, batches[0], "late")
        assert not await offload.mark_offloaded(
            conn, batches[0], binding_id="b", provider_batch_id="x", state="s", now=later
        )
