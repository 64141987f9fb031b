"""``store.audit`` on real SQLite and Postgres (SPEC §21): appenders on many connections at once still
form one chain (the chain lock), entries are written only with their transaction, and what is read
back is exactly what was hashed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.audit import verify_chain
from relay.domain.ids import mint_id
from relay.domain.times import rfc3339
from relay.store import audit as store
from relay.store.audit_tables import audit_entries
from relay.store.catalog import utcnow
from tests.fixtures.databases import emptied_engine


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    async with emptied_engine(migrated_url, [audit_entries]) as engine:
        yield engine.execution_options(sqlite_begin="IMMEDIATE")


def entry(ref: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": mint_id("aud"),
        "at": rfc3339(utcnow()),
        "actor": {"kind": "admin_token"},
        "action": "update",
        "kind": "Policy",
        "ref": ref,
        "ip": "127.0.0.1",
        "user_agent": None,
        "request_id": None,
        **extra,
    }


async def everything(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [e for _, e in await store.in_order(conn, after_seq=0, limit=100_000)]


async def test_concurrent_appenders_form_one_chain(engine: AsyncEngine) -> None:
    async def writer(w: int) -> None:
        for i in range(10):
            async with engine.begin() as conn:
                await store.append(conn, [entry(f"w{w}-{i}"), entry(f"w{w}-{i}b")])
                await asyncio.sleep(0)  # let the others reach their append while this one holds it

    await asyncio.gather(*(writer(w) for w in range(8)))
    entries = await everything(engine)
    assert len(entries) == 8 * 10 * 2
    assert verify_chain(entries).as_json() == {"ok": True, "entries": 160, "first_bad": None}
    for w in range(8):  # each transaction's two entries are adjacent: appended under one lock
        for i in range(10):
            refs = [e["ref"] for e in entries]
            assert refs.index(f"w{w}-{i}b") == refs.index(f"w{w}-{i}") + 1


async def test_an_entry_exists_only_with_its_transaction_and_reads_back_as_hashed(
    engine: AsyncEngine,
) -> None:
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await store.append(conn, [entry("rolled-back")])
            raise RuntimeError("the change failed")
    assert await everything(engine) == []
    odd = {"price": 0.1 + 0.2, "tiny": 1e-07, "name": "Équipe ✓", "nested": {"b": [1, None], "a": True}}
    async with engine.begin() as conn:
        [stored] = await store.append(conn, [entry("kept", before=odd, after={"password": "<redacted>"})])
    [read] = await everything(engine)
    assert read == stored and read["before"] == odd
    assert verify_chain([read]).ok
