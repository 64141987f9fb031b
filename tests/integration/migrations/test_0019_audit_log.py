"""Migration 0019: ``audit_entries`` (SPEC §21) is created empty with its unique ids and its ``at``
index, the schema then equals the tables Relay declares, and a downgrade drops only that table."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.audit import verify_chain
from relay.store import audit as store
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head
from tests.integration.migrations.helpers import tables


async def test_0019_creates_the_audit_table_and_takes_it_away_again(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0018")
    before = await tables(engine)
    assert "audit_entries" not in before

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    await downgrade_to(engine, "0019")  # the revisions after it add tables of their own
    assert await tables(engine) == before | {"audit_entries"}
    await upgrade_to_head(engine)
    entry = {
        "id": "aud_first",
        "at": "2026-12-06T03:40:12.345678Z",
        "actor": {"kind": "admin_token"},
        "action": "create",
        "kind": "Team",
        "ref": "tm_1",
        "after": {"name": "t"},
        "ip": None,
        "user_agent": None,
        "request_id": None,
    }
    async with engine.begin() as conn:
        await store.append(conn, [entry])
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            async with conn.begin_nested():
                await store.append(conn, [{**entry, "ref": "tm_2"}])  # the same id twice
    async with engine.connect() as conn:
        chain = [e for _, e in await store.in_order(conn, after_seq=0, limit=10)]
    assert verify_chain(chain).as_json() == {"ok": True, "entries": 1, "first_bad": None}

    await downgrade_to(engine, "0018")
    assert await tables(engine) == before
