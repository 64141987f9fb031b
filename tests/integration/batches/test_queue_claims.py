"""The batch store's claims on real SQLite and Postgres: fair order, the attribution a claim returns, and
concurrent claimants (replicas simulated by several engines) never claiming an item twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store.driver import pooled
from relay.store.engine import is_transient
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import (
    KEY_HASH,
    available,
    cancel_events,
    claim_run,
    complete,
    completed_at,
    events,
    items,
    submit,
)

# ---------------------------------------------------------------------------------------------- claim


async def test_claim_marks_items_running_and_returns_the_attribution(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5, policy_name="gold", inbound_shape="anthropic")

    claimed = await claim_run(engine, "r1", 2)

    assert [(c.batch_id, c.idx) for c in claimed] == [(batch_id, 0), (batch_id, 1)]
    record = claimed[0].batch
    assert claimed[1].batch is record
    assert (record.owner, record.key_hash, record.policy_id, record.policy_name) == (
        KEY_HASH,
        KEY_HASH,
        "pol_1",
        "gold",
    )
    assert (record.project_id, record.team_id, record.principal_kind, record.principal_id) == (
        "prj_1",
        "tm_1",
        "serviceaccount",
        "sa_1",
    )
    assert (record.credential_kind, record.credential_id, record.inbound_shape) == (
        "key",
        "rk_1",
        "anthropic",
    )
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"]) for r in rows[:3]] == [("running", "r1")] * 2 + [
        ("available", None)
    ]
    assert all(r["claimed_at"] is not None for r in rows[:2])
    async with engine.connect() as conn:
        workers = (await conn.execute(select(t.batch_workers.c.instance_id))).scalars().all()
    assert workers == ["r1"]  # a claimant always has a worker row, or rescue would take it for dead


async def test_claims_take_turns_so_a_small_batch_starts_at_once(engine: AsyncEngine) -> None:
    big = await submit(engine, 200)
    small = await submit(engine, 3)

    rounds = [await claim_run(engine, "r1", 10) for _ in range(4)]

    assert [(r[0].batch_id, [c.idx for c in r]) for r in rounds] == [
        (big, list(range(10))),
        (small, [0, 1, 2]),
        (big, list(range(10, 20))),
        (big, list(range(20, 30))),
    ]


async def test_a_newer_batch_is_served_before_one_already_served(engine: AsyncEngine) -> None:
    first = await submit(engine, 50)
    assert (await claim_run(engine, "r1", 5))[0].batch_id == first
    second = await submit(engine, 50)
    third = await submit(engine, 50)

    order = [(await claim_run(engine, "r1", 5))[0].batch_id for _ in range(6)]

    assert order == [second, third, first, second, third, first]


async def test_nothing_to_claim(engine: AsyncEngine) -> None:
    assert await claim_run(engine, "r1", 10) == []
    batch_id = await submit(engine, 2)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))
    assert await claim_run(engine, "r1", 10) == []
    assert await claim_run(engine, "r1", 0) == []


async def test_concurrent_claimants_never_claim_an_item_twice(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    batch_ids = [await submit(engine, n) for n in (150, 40, 7)]
    seen: Counter[tuple[str, int]] = Counter()

    async def worker(replica: AsyncEngine, name: str) -> None:
        while True:
            claimed = await claim_run(replica, name, 7)
            seen.update((c.batch_id, c.idx) for c in claimed)
            if not claimed and await available(replica) == 0:
                return  # (an empty claim alone may only mean every open batch was locked just then)

    await asyncio.gather(*(worker(r, f"r{n}-{w}") for n, r in enumerate(replica_engines) for w in range(3)))

    expected = {(b, i) for b, n in zip(batch_ids, (150, 40, 7), strict=True) for i in range(n)}
    assert set(seen) == expected
    assert set(seen.values()) == {1}


async def test_concurrent_finishers_complete_the_batch_once(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    """The last two items finishing at once on two replicas must still set completed_at."""
    for _ in range(3):
        batch_id = await submit(engine, 30)
        claimed = [await claim_run(r, f"r{n}", 10) for n, r in enumerate(replica_engines)]
        results = await asyncio.gather(
            *(
                complete(replica_engines[n], f"r{n}", item)
                for n, group in enumerate(claimed)
                for item in group
            )
        )
        assert all(results)
        assert await completed_at(engine, batch_id) is not None
        assert len(await events(engine, batch_id)) == 30


async def test_a_claim_passes_over_the_batches_of_held_policies(engine: AsyncEngine) -> None:
    """SPEC §17: items of a policy held back by pacing stay available while other policies' run."""
    held = await submit(engine, 3, policy_id="pol_held")
    other = await submit(engine, 2, policy_id="pol_free")

    claimed = await queue_ops.claim(engine, "r1", 10, skip_policies=["pol_held"])
    assert {(c.batch_id, c.idx) for c in claimed} == {(other, 0), (other, 1)}
    assert await queue_ops.claim(engine, "r1", 10, skip_policies=["pol_held", "pol_free"]) == []

    claimed = await queue_ops.claim(engine, "r1", 10)
    assert {(c.batch_id, c.idx) for c in claimed} == {(held, 0), (held, 1), (held, 2)}


async def test_a_claim_in_its_callers_transaction_rolls_back_with_it(engine: AsyncEngine) -> None:
    """A claim on a connection already in a transaction joins it (a SQLite write group's turn). On
    Postgres its statements run on the driver itself, before SQLAlchemy has sent anything on that
    transaction: they still roll back with it (``relay.store.driver``), reserving nothing."""
    batch_id = await submit(engine, 3)
    async with engine.connect() as conn:
        with pytest.raises(RuntimeError, match="the caller failed"):
            async with conn.begin():
                claimed = await queue_ops.claim(conn, "r1", 2)
                assert [(c.batch_id, c.idx) for c in claimed] == [(batch_id, 0), (batch_id, 1)]
                raise RuntimeError("the caller failed")

    assert [r["claimed_by"] for r in await items(engine, batch_id)] == [None, None, None]
    async with engine.connect() as conn:
        assert (await conn.execute(select(t.batch_workers.c.instance_id))).all() == []
        assert (await conn.execute(select(t.batch_project_turns.c.project_id))).all() == []
    assert [c.idx for c in await queue_ops.claim(engine, "r1", 2)] == [0, 1]


@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "callers-transaction"])
async def test_a_claim_on_a_connection_the_database_closed_fails_as_an_outage(
    engine: AsyncEngine, in_transaction: bool
) -> None:
    """On Postgres a claim is one statement on the driver itself (``relay.store.driver``): a connection
    closed under it fails with the driver's own error or, in a caller's transaction, with the error
    SQLAlchemy's own BEGIN would raise. The batch loops take either for an outage and retry
    (``is_transient``), not for a bug that drops the work."""
    if engine.dialect.name != "postgresql":
        pytest.skip("the driver path is Postgres's")
    await submit(engine, 2)
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        await raw.close()
        expected = DBAPIError if in_transaction else asyncpg.InterfaceError
        with pytest.raises(expected) as failed:
            if in_transaction:
                async with conn.begin():
                    await queue_ops.claim(conn, "r1", 2)
            else:
                await queue_ops.claim(conn, "r1", 2)
        await conn.invalidate()
    assert is_transient(failed.value), failed.value
    assert [c.idx for c in await queue_ops.claim(engine, "r1", 2)] == [0, 1]


async def test_a_held_connection_invalidated_after_an_outage_claims_again_on_a_new_driver_connection(
    engine: AsyncEngine,
) -> None:
    """The hot statements read the driver's connection straight from a valid SQLAlchemy connection
    (``relay.store.driver.pooled``: no greenlet per statement). One invalidated after a failure (what
    ``relay.store.held`` does) must not hand out the dead driver connection: it reconnects, as
    ``get_raw_connection`` does, and the next claim works on the same SQLAlchemy connection."""
    await submit(engine, 2)
    async with engine.connect() as conn:
        before = await pooled(conn)
        assert before is await conn.get_raw_connection()  # the same object, read without a greenlet
        dead = before.driver_connection
        await conn.invalidate()
        after = await pooled(conn)
        assert after.driver_connection is not dead and after.driver_connection is not None
        claimed = await queue_ops.claim(conn, "r1", 2)
        if conn.in_transaction():
            await conn.commit()
    assert [c.idx for c in claimed] == [0, 1]
