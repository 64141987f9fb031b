"""The Alembic revisions produce exactly tables.py, on SQLite and Postgres, and migrate safely at boot."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import (
    BigInteger,
    Column,
    DefaultClause,
    MetaData,
    String,
    UniqueConstraint,
    event,
    inspect,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batch_apis.openai_service import API, CLAIM_PREFIX, FINALIZING
from relay.store import migrate
from relay.store.columns import NAMING
from relay.store.engine import create_engine
from relay.store.facade_batches import waiting_to_finalize
from relay.store.migrate import (
    MIGRATION_LOCK_KEY,
    MIGRATIONS_DIR,
    check_schema,
    current_revision,
    downgrade_to,
    head_revision,
    upgrade_to_head,
)
from relay.store.tables import metadata

RELAY_TABLES = set(metadata.tables)


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


def changes(diff: Iterable[Any]) -> set[tuple[str, str]]:
    """An autogenerate diff as (operation, "table.column" or object name) pairs."""
    found: set[tuple[str, str]] = set()
    for entry in diff:
        if isinstance(entry, list):  # column changes come grouped per column
            found |= changes(entry)
        elif entry[0] == "add_column":
            found.add((entry[0], f"{entry[2]}.{entry[3].name}"))
        elif entry[0].startswith("modify_"):
            found.add((entry[0], f"{entry[2]}.{entry[3]}"))
        else:
            found.add((entry[0], entry[1].name))
    return found


def copy_of_metadata() -> MetaData:
    copy = MetaData(naming_convention=NAMING)
    for table in metadata.sorted_tables:
        table.to_metadata(copy)
    return copy


async def test_empty_database_migrates_to_exactly_tables_py(engine: AsyncEngine) -> None:
    assert await current_revision(engine) is None
    assert await table_names(engine) == set()

    await upgrade_to_head(engine)

    assert await current_revision(engine) == head_revision()
    assert (
        head_revision() == sorted(p.name[:4] for p in MIGRATIONS_DIR.joinpath("versions").glob("0*.py"))[-1]
    )
    assert await table_names(engine) == RELAY_TABLES | {"alembic_version"}
    assert await check_schema(engine) == []


async def test_check_schema_sees_every_kind_of_difference(engine: AsyncEngine) -> None:
    """The empty diff above means something only if the comparison notices what it must."""
    await upgrade_to_head(engine)

    changed = copy_of_metadata()
    changed.tables["teams"].append_column(Column("color", String(20), nullable=True))
    changed.tables["policies"].c.enabled.server_default = DefaultClause("0")
    changed.tables["users"].c.token_version.type = BigInteger()
    changed.tables["models"].c.name.type = String(64)
    changed.tables["hosts"].c.base_url.nullable = True
    relay_keys = changed.tables["relay_keys"]
    relay_keys.indexes.discard(next(i for i in relay_keys.indexes if i.name == "ix_relay_keys_user_id"))
    changed.tables["hosts"].append_constraint(UniqueConstraint("base_url", name="uq_hosts_base_url"))
    (alias_fk,) = changed.tables["model_aliases"].foreign_key_constraints
    alias_fk.ondelete = "RESTRICT"

    assert changes(await check_schema(engine, target=changed)) == {
        ("add_column", "teams.color"),
        ("modify_default", "policies.enabled"),
        ("modify_type", "users.token_version"),
        ("modify_type", "models.name"),
        ("modify_nullable", "hosts.base_url"),
        ("remove_index", "ix_relay_keys_user_id"),
        ("add_constraint", "uq_hosts_base_url"),
        ("remove_fk", "fk_model_aliases_model_id_models"),  # ON DELETE CASCADE, to be replaced by
        ("add_fk", "fk_model_aliases_model_id_models"),  # ON DELETE RESTRICT
    }

    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE stray (id INTEGER PRIMARY KEY)"))
    assert changes(await check_schema(engine)) == {("remove_table", "stray")}


async def test_round_trip_down_to_base_and_up_again(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "base")

    assert await current_revision(engine) is None
    assert await table_names(engine) - {"alembic_version"} == set()

    await upgrade_to_head(engine)
    assert await current_revision(engine) == head_revision()
    assert await check_schema(engine) == []


async def test_batch_items_keep_their_rows_when_response_references_arrive(engine: AsyncEngine) -> None:
    """0005 adds where a completed item's response body is. Items completed before it keep their rows
    (no reference: their per-item file is read); the new CHECK refuses a partial reference, or one on
    an item that is not completed; the partial indexes survive SQLite's table copy."""
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0004")
    now = datetime.now(UTC)
    batch = {
        "id": "b_" + "0" * 26, "owner": "o", "key_hash": "h", "policy_id": "p", "policy_name": "p",
        "project_id": "pr", "team_id": "t", "principal_kind": "user", "principal_id": "u",
        "credential_kind": "key", "credential_id": "c", "inbound_shape": "openai", "status": "queued",
        "total_items": 2, "created_at": now,
    }  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(
            text(f"INSERT INTO batches ({', '.join(batch)}) VALUES (:{', :'.join(batch)})"), batch
        )
        await conn.execute(
            text(
                "INSERT INTO batch_items (batch_id, idx, state, finished_at, status) VALUES"
                " (:b, 0, 'completed', :now, 200), (:b, 1, 'available', NULL, NULL)"
            ),
            {"b": batch["id"], "now": now},
        )
    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT idx, state, status, response_file FROM batch_items"))).all()
    assert sorted(tuple(row) for row in rows) == [(0, "completed", 200, None), (1, "available", None, None)]
    refused = [
        "UPDATE batch_items SET response_file = 'responses-0123456789abcdef.data' WHERE idx = 0",
        "UPDATE batch_items SET response_file = 'r', response_offset = 0, response_length = 1 WHERE idx = 1",
    ]
    for statement in refused:
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text(statement))
    whole = "UPDATE batch_items SET response_file = 'r', response_offset = 0, response_length = 1"
    async with engine.begin() as conn:
        await conn.execute(text(whole + " WHERE idx = 0"))


async def test_catalog_revision_row_starts_at_zero(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT id, revision, updated_at FROM catalog_revision"))).all()
    assert [(row.id, row.revision) for row in rows] == [(1, 0)]
    updated_at = rows[0].updated_at
    if isinstance(updated_at, str):  # raw SQL on SQLite: no type to parse it
        updated_at = datetime.fromisoformat(updated_at)
    # SQLite keeps the UTC wall clock but not the offset.
    assert abs(updated_at.replace(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=1)


async def test_upgrading_twice_is_a_no_op(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE catalog_revision SET revision = 7"))

    await upgrade_to_head(engine)

    assert await current_revision(engine) == head_revision()
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT revision FROM catalog_revision"))).scalar_one() == 7
        assert (await conn.execute(text("SELECT count(*) FROM alembic_version"))).scalar_one() == 1
    assert await check_schema(engine) == []


async def test_sqlite_foreign_keys_are_enforced_after_migrating(tmp_path: Path) -> None:
    """The migration switches foreign keys off around its transaction; they must come back on the
    very connection it used (the engine's pool hands that one out next)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'relay.db'}")
    try:
        await upgrade_to_head(engine)
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one() == 1
            with pytest.raises(IntegrityError, match="FOREIGN KEY"):
                await conn.execute(
                    text(
                        "INSERT INTO projects (id, name, created_at, updated_at, team_id)"
                        " VALUES ('prj_1', 'p', :now, :now, 'tm_missing')"
                    ),
                    {"now": datetime.now(UTC)},
                )
    finally:
        await engine.dispose()


async def test_a_failing_migration_leaves_the_database_untouched(engine: AsyncEngine) -> None:
    """All revisions run in one transaction on both backends (SQLite: BEGIN IMMEDIATE)."""

    def upgrade_then_fail(config: Config) -> None:
        command.upgrade(config, "head")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await migrate._migrate(engine, upgrade_then_fail)

    assert await current_revision(engine) is None
    assert await table_names(engine) - {"alembic_version"} == set()
    await upgrade_to_head(engine)
    assert await check_schema(engine) == []


async def test_concurrent_migrators_on_postgres(postgres_url: str) -> None:
    engines = [create_engine(postgres_url) for _ in range(2)]
    try:
        await asyncio.gather(*(upgrade_to_head(engine) for engine in engines))
        for engine in engines:
            assert await current_revision(engine) == head_revision()
        assert await check_schema(engines[0]) == []
        async with engines[0].connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM catalog_revision"))).scalar_one() == 1
    finally:
        for engine in engines:
            await engine.dispose()


async def test_upgrade_waits_for_the_advisory_lock(postgres_url: str) -> None:
    """What makes replicas safe (the test above runs in one process, where migrations also queue on an
    in-process lock): a migrator finding the advisory lock held waits for it, having changed nothing."""
    holder, migrator = create_engine(postgres_url), create_engine(postgres_url)
    waiting = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND classid::bigint = :high AND objid::bigint = :low"
    )
    key = {"high": MIGRATION_LOCK_KEY >> 32, "low": MIGRATION_LOCK_KEY & 0xFFFFFFFF}
    try:
        async with holder.connect() as conn:
            transaction = await conn.begin()
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            upgrade = asyncio.create_task(upgrade_to_head(migrator))
            for _ in range(500):  # up to 10 s
                if (await conn.execute(waiting, key)).scalar_one() == 1:
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail("upgrade_to_head never waited for the advisory lock")
            assert not upgrade.done()
            await transaction.commit()
        await asyncio.wait_for(upgrade, timeout=10)
        assert await current_revision(migrator) == head_revision()
        assert await check_schema(migrator) == []
    finally:
        await holder.dispose()
        await migrator.dispose()


# A replica: imports everything, says so, waits for the word, then migrates.
MIGRATOR = """
import asyncio, sys
from relay.store.engine import create_engine
from relay.store.facade_batches import waiting_to_finalize
from relay.store.migrate import upgrade_to_head

async def main(url):
    engine = create_engine(url)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()

print("ready", flush=True)
sys.stdin.readline()
asyncio.run(main(sys.argv[1]))
"""


async def test_two_processes_migrating_one_sqlite_file(tmp_path: Path) -> None:
    """Separate processes share no in-process lock: BEGIN IMMEDIATE is what serialises them."""
    await migrate_together(f"sqlite:///{tmp_path / 'relay.db'}")


async def test_two_processes_opening_one_new_sqlite_file_never_see_it_locked(tmp_path: Path) -> None:
    """Both switch the new file to WAL as they connect; SQLite answers the loser "database is locked"
    at once (no busy handler for that lock), which failed about one start in ten before the switch
    was retried. Eight fresh files in a row."""
    for attempt in range(8):
        await migrate_together(f"sqlite:///{tmp_path / f'relay-{attempt}.db'}")


async def migrate_together(url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            MIGRATOR,
            url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for process in processes:
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), timeout=30) == b"ready\n"
    outputs = await asyncio.wait_for(
        asyncio.gather(*(process.communicate(b"go\n") for process in processes)), timeout=30
    )
    assert [process.returncode for process in processes] == [0, 0], [err.decode() for _, err in outputs]

    engine = create_engine(url)
    try:
        assert await current_revision(engine) == head_revision()
        assert await check_schema(engine) == []
    finally:
        await engine.dispose()


async def indexes(engine: AsyncEngine, table: str) -> dict[str, dict[str, Any]]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_indexes(table))
    return {index["name"]: index for index in found}


async def columns(engine: AsyncEngine, table: str) -> set[str]:
    async with engine.connect() as conn:
        return {c["name"] for c in await conn.run_sync(lambda sync: inspect(sync).get_columns(table))}


async def test_0011_adds_the_finalizer_and_sweep_indexes_and_reasoning_tokens(engine: AsyncEngine) -> None:
    """The finalizer's poll gets a partial index on its own predicate, the idempotency sweep one on
    ``created_at``; usage events written before keep their rows with ``reasoning_tokens`` NULL; all
    of it goes again on downgrade."""
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0010")
    assert "ix_batches_finalizing" not in await indexes(engine, "batches")
    assert "ix_idempotency_keys_created_at" not in await indexes(engine, "idempotency_keys")
    old_event = {
        "id": "ue_1", "ts": datetime.now(UTC), "request_id": "r1", "source": "live", "status": 200,
        "model": "m", "upstream_model": "m", "host": "h", "adapter": "openai", "inbound_shape": "openai",
        "attempts": 1, "streamed": False, "input_tokens": 3, "output_tokens": 2, "cached_input_tokens": 0,
        "latency_ms": 1, "policy_id": "p", "project_id": "pr", "team_id": "t", "principal_kind": "user",
        "principal_id": "u", "credential_kind": "key", "credential_id": "c",
    }  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(
            text(f"INSERT INTO usage_events ({', '.join(old_event)}) VALUES (:{', :'.join(old_event)})"),
            old_event,
        )

    await upgrade_to_head(engine)

    finalizing = (await indexes(engine, "batches"))["ix_batches_finalizing"]
    assert finalizing["column_names"] == ["completed_at", "id"]
    predicate = " ".join(str(v) for v in finalizing.get("dialect_options", {}).values())
    assert "finalizing" in predicate and "fin@" in predicate  # partial: only batches waiting for files
    assert (await indexes(engine, "idempotency_keys"))["ix_idempotency_keys_created_at"]["column_names"] == [
        "created_at"
    ]
    async with engine.connect() as conn:
        rows = (
            await conn.execute(text("SELECT id, output_tokens, reasoning_tokens FROM usage_events"))
        ).all()
    assert [tuple(row) for row in rows] == [("ue_1", 2, None)]
    assert await check_schema(engine) == []

    await downgrade_to(engine, "0010")
    assert "ix_batches_finalizing" not in await indexes(engine, "batches")
    assert "ix_idempotency_keys_created_at" not in await indexes(engine, "idempotency_keys")
    assert "reasoning_tokens" not in await columns(engine, "usage_events")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM usage_events"))).scalar_one() == 1


async def test_the_finalizer_poll_is_answered_from_its_partial_index(tmp_path: Path) -> None:
    """The index helps only if the planner can match the poll's WHERE to its predicate: SQLite matches
    term by term, so the poll must spell the façade's values as literals (not bound parameters)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'relay.db'}")
    statements: list[tuple[str, Any]] = []
    try:
        await upgrade_to_head(engine)

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
            statements.append((statement, params))

        async with engine.connect() as conn:
            waiting = await waiting_to_finalize(conn, API, waiting=FINALIZING, prefix=CLAIM_PREFIX, limit=5)
            assert waiting == []
            statement, params = statements[-1]
            plan = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)).all()
    finally:
        await engine.dispose()
    assert any("USING INDEX ix_batches_finalizing" in row[-1] for row in plan), plan


async def test_0012_adds_the_policy_batch_block_null_for_policies_written_before(engine: AsyncEngine) -> None:
    """Policies written before 0012 keep their rows with ``batch`` NULL, which the snapshot reads as
    the defaults (SPEC §17: absent = §10.4's rule); the column goes again on downgrade."""
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0012")
    await downgrade_to(engine, "-1")
    assert "batch" not in await columns(engine, "policies")
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO policies (id, name, created_at, updated_at, models, rate_limit) "
                "VALUES ('pol_1', 'old', :now, :now, '[]', '{\"rules\": []}')"
            ),
            {"now": now},
        )

    await upgrade_to_head(engine)

    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT id, batch FROM policies"))).one()
    assert tuple(row) == ("pol_1", None)
    assert await check_schema(engine) == []

    await downgrade_to(engine, "0012")
    await downgrade_to(engine, "-1")
    assert "batch" not in await columns(engine, "policies")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM policies"))).scalar_one() == 1


async def test_0018_adds_the_policy_cache_block_and_the_usage_cache_hit_flag(engine: AsyncEngine) -> None:
    """Policies written before 0018 have no cache (``cache`` NULL: off, SPEC §19) and usage events
    written before it were not cache hits (``cache_hit`` false); both columns go again on downgrade."""
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0017")
    assert "cache" not in await columns(engine, "policies")
    assert "cache_hit" not in await columns(engine, "usage_events")
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO policies (id, name, created_at, updated_at, models, rate_limit) "
                "VALUES ('pol_c', 'before-cache', :now, :now, '[]', '{\"rules\": []}')"
            ),
            {"now": now},
        )

    await upgrade_to_head(engine)

    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT id, cache FROM policies WHERE id = 'pol_c'"))).one()
    assert tuple(row) == ("pol_c", None)
    assert "cache_hit" in await columns(engine, "usage_events")
    assert await check_schema(engine) == []

    await downgrade_to(engine, "0017")
    assert "cache" not in await columns(engine, "policies")
    assert "cache_hit" not in await columns(engine, "usage_events")
