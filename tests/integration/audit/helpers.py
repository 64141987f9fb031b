"""What the audit-log tests share: the entries a control-plane answer appended (by its
``X-Relay-Request-ID``), every entry through the API, and SQL on the relay's own database (to read
the raw rows and to tamper with them behind Relay's back)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from sqlalchemy import text

from relay.store.engine import create_engine
from tests.fixtures.relay_server import RelayProcess


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def all_entries(relay: RelayProcess, **params: str) -> list[dict[str, Any]]:
    """Every entry (matching ``params``), newest first, through the API's keyset pages."""
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {**params, "limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = relay.control.get("/api/audit", params=query)
        assert page.status_code == 200, page.text
        out.extend(page.json()["items"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return out


def appended_by(relay: RelayProcess, response: httpx.Response) -> list[dict[str, Any]]:
    """The entries the request behind ``response`` appended, oldest first."""
    request_id = response.headers["x-relay-request-id"]
    return [e for e in reversed(all_entries(relay)) if e["request_id"] == request_id]


def summary(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["action"], e["kind"], e["ref"]) for e in entries]


def sql(relay: RelayProcess, statement: str, **params: Any) -> list[Any]:
    """One statement on the relay's database, in its own transaction; a select's rows."""

    async def run() -> list[Any]:
        engine = create_engine(relay.database_url)
        try:
            async with engine.begin() as conn:
                result = await conn.execute(text(statement), params)
                return list(result) if result.returns_rows else []
        finally:
            await engine.dispose()

    return asyncio.run(run())
