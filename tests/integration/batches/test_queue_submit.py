"""The batch store's submit on real SQLite and Postgres: a batch and all its items, all or nothing, and
what the schema refuses (the 50 000-item insert and claim are measured here too).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import batch_row, claim_run, items, submit

# ---------------------------------------------------------------------------------------------- submit


async def test_insert_writes_the_batch_and_every_item_available(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5)

    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None
    assert (view.record.status, view.record.total_items, view.record.completed_at) == ("queued", 5, None)
    assert view.record.policy_name == "default" and view.record.token_claims is None
    assert view.counts == {"available": 5}
    assert [(item.idx, item.state) for item in view.items] == [(i, "available") for i in range(5)]


async def test_a_duplicate_batch_id_writes_nothing(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)

    with pytest.raises(IntegrityError):
        await submit(engine, 7, id=batch_id)

    assert len(await items(engine, batch_id)) == 3
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.total_items == 3


async def test_a_failing_item_insert_leaves_no_batch(database_url: str) -> None:
    """All or nothing (SPEC §10.1): a trigger refuses item 7, so the batch row must go too."""
    engine = create_engine(database_url)
    try:
        await upgrade_to_head(engine)
        async with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(
                    text(
                        "CREATE FUNCTION refuse_7() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                        " IF NEW.idx = 7 THEN RAISE EXCEPTION 'item 7 refused'; END IF; RETURN NEW; END $$"
                    )
                )
                await conn.execute(
                    text(
                        "CREATE TRIGGER refuse_7 BEFORE INSERT ON batch_items"
                        " FOR EACH ROW EXECUTE FUNCTION refuse_7()"
                    )
                )
            else:
                await conn.execute(
                    text(
                        "CREATE TRIGGER refuse_7 BEFORE INSERT ON batch_items WHEN NEW.idx = 7"
                        " BEGIN SELECT RAISE(ABORT, 'item 7 refused'); END"
                    )
                )
        row = batch_row()
        with pytest.raises(Exception, match="item 7 refused"):
            await queue_ops.insert_batch(engine, row, 10)

        assert await queue_ops.batch_record(engine, row["id"]) is None
        assert await items(engine, row["id"]) == []
        await queue_ops.insert_batch(engine, batch_row(), 5)  # the trigger only refuses idx 7
    finally:
        await engine.dispose()


async def test_a_token_batch_records_its_claims(engine: AsyncEngine) -> None:
    claims = {"sub": "usr_1", "jti": "j1", "exp": 1_900_000_000}
    batch_id = await submit(
        engine,
        1,
        owner="user:usr_1",
        key_hash=None,
        token_claims=claims,
        principal_kind="user",
        credential_kind="token",
        credential_id="j1",
    )
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.token_claims == claims and record.key_hash is None


# ---------------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    "values",
    [
        {"state": "completed"},  # a final state without finished_at
        {"state": "discarded", "finished_at": datetime.now(UTC)},  # a failure without an error
        {"state": "running"},  # running without a claimant
        {"claimed_by": "r1"},  # reserved without a claim time
        {"state": "waiting"},
    ],
)
async def test_the_schema_refuses_impossible_items(engine: AsyncEngine, values: dict[str, Any]) -> None:
    batch_id = await submit(engine, 1)
    with pytest.raises(IntegrityError, match="ck_batch_items_"):
        async with engine.begin() as conn:
            await conn.execute(
                update(t.batch_items).where(t.batch_items.c.batch_id == batch_id).values(values)
            )


async def test_the_schema_refuses_a_batch_without_its_credential(engine: AsyncEngine) -> None:
    with pytest.raises(IntegrityError, match="ck_batches_credential_recorded"):
        await submit(engine, 1, key_hash=None)


# ---------------------------------------------------------------------------------------------- scale


async def test_50000_items_insert_and_claim_quickly(
    engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured, not asserted beyond sanity (SPEC §13: speed is for benchmarks): printed with -s."""
    started = time.perf_counter()
    batch_id = await submit(engine, 50_000)
    inserted = time.perf_counter() - started
    for _ in range(3):  # move past the first items, then time a claim deep into the batch
        await claim_run(engine, "r1", 16)
    started = time.perf_counter()
    claimed = await claim_run(engine, "r1", 16)
    claim_s = time.perf_counter() - started
    started = time.perf_counter()
    view = await queue_ops.batch_view(engine, batch_id)
    view_s = time.perf_counter() - started

    assert [c.idx for c in claimed] == list(range(48, 64))
    assert view is not None and view.counts == {"available": 49_936, "running": 64}
    with capsys.disabled():
        print(
            f"\n[{engine.dialect.name}] insert 50 000 items: {inserted * 1000:.0f} ms;"
            f" claim 16: {claim_s * 1000:.1f} ms; status view: {view_s * 1000:.0f} ms"
        )
