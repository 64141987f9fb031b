"""Which database failures the batch workers retry (``store.engine.is_transient``), on real failures:
a refused connection, a connection the server terminated (as a restart does), and — not transient — a
constraint violation and a syntax error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from relay.store.engine import create_engine, is_transient
from tests.fixtures.relay_server import free_port


async def failure(url: str, *statements: str) -> BaseException:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
    raise AssertionError("the statements did not fail")


async def test_a_refused_connection_is_transient() -> None:
    exc = await failure(f"postgresql://postgres@127.0.0.1:{free_port()}/test", "SELECT 1")
    assert is_transient(exc), repr(exc)


async def test_a_terminated_connection_is_transient(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        async with engine.connect() as victim:
            pid = (await victim.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            async with engine.connect() as admin:
                await admin.execute(text(f"SELECT pg_terminate_backend({pid})"))
            with pytest.raises(Exception) as caught:
                await victim.execute(text("SELECT 1"))
        assert is_transient(caught.value), repr(caught.value)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    "statements",
    [
        ("CREATE TEMP TABLE t (x int PRIMARY KEY)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)"),
        ("SELEC 1",),
    ],
    ids=["integrity", "syntax"],
)
async def test_statement_errors_are_not_transient(database_url: str, statements: tuple[str, ...]) -> None:
    exc = await failure(database_url, *statements)
    assert not is_transient(exc), repr(exc)


async def test_a_locked_sqlite_file_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x int)")
        holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        exc = await failure(f"sqlite:///{path}", "PRAGMA busy_timeout=0", "INSERT INTO t VALUES (1)")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert is_transient(exc), repr(exc)


async def test_the_drivers_own_errors_are_judged_alike(postgres_url: str) -> None:
    """``BatchStore.start`` runs its statement on asyncpg directly: a terminated connection seen there is
    transient, a syntax error is not."""
    engine = create_engine(postgres_url)
    try:
        async with engine.connect() as victim:
            raw = (await victim.get_raw_connection()).driver_connection
            assert raw is not None
            with pytest.raises(Exception) as syntax:
                await raw.fetch("SELEC 1")
            pid = await raw.fetchval("SELECT pg_backend_pid()")
            async with engine.connect() as admin:
                await admin.execute(
                    text(f"SELECT pg_terminate_backend({pid}, 10000)")
                )  # gone when it answers
            with pytest.raises(Exception) as terminated:
                await raw.fetch("SELECT 1")
        assert not is_transient(syntax.value), repr(syntax.value)
        assert is_transient(terminated.value), repr(terminated.value)
    finally:
        await engine.dispose()
