"""A webhook's recent delivery attempts (SPEC §10.10), for ``GET /api/webhooks/{ref}/deliveries`` and
the dashboard's webhook pages alike, so both show (and refuse) exactly the same with no SQL of their own.

The webhook is found like any catalog object (name or id; 404 otherwise), ``limit`` is checked with the
listing rules of ``control.query`` (1–1000, default 50; anything else → 400 naming it), the attempts
come from ``store.webhooks`` most recent first and are rendered here.

What it deliberately does not know: HTTP, or how deliveries are made (``relay.webhooks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.control.kinds import WEBHOOK
from relay.control.query import parse_limit
from relay.control.services.catalog import CatalogService
from relay.domain.times import rfc3339
from relay.store import webhooks as store

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def render_delivery(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "event_id": row["event_id"],
        "type": row["type"],
        "attempt": row["attempt"],
        "status_code": row["status_code"],
        "latency_ms": row["latency_ms"],
        "error": row["error"],
        "created_at": rfc3339(row["created_at"]),
        "next_attempt_at": rfc3339(row["next_attempt_at"]),
    }


class WebhookDeliveries:
    def __init__(self, catalog: CatalogService, engine: AsyncEngine) -> None:
        self._catalog = catalog
        self._engine = engine

    async def recent(self, ref: str, params: Mapping[str, str]) -> dict[str, Any]:
        """The answer of ``GET /api/webhooks/{ref}/deliveries`` for the (already single) ``params``."""
        limit = parse_limit(params.get("limit"), default=DEFAULT_LIMIT, maximum=MAX_LIMIT)
        webhook = await self._catalog.get(WEBHOOK, ref)
        rows = await store.recent_deliveries(self._engine, webhook["id"], limit)
        return {"items": [render_delivery(row) for row in rows]}
