"""``GET /api/webhooks/{ref}/deliveries`` (SPEC §10.10): a webhook's recent delivery attempts.

Thin: the webhook is found like any catalog object (name or id; 404 otherwise), ``limit`` is checked
with the listing rules of ``control.query`` (1–1000, default 50; anything else → 400 naming it), the
attempts come from ``store.webhooks`` most recent first and are rendered here. The CRUD of the kind
itself is the generic one (``control.kinds``). Admin bearer only.

:class:`WebhookDeliveries` is the service behind the route, so the dashboard's webhook pages show (and
refuse) exactly what the API does without any SQL of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Depends, FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.control.catalog import CatalogService
from relay.control.kinds import WEBHOOK
from relay.control.query import parse_limit, single_params
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


def mount_webhook_routes(app: FastAPI, deliveries_of: WebhookDeliveries, require_admin: Any) -> None:
    @app.get(
        "/api/webhooks/{ref}/deliveries",
        dependencies=[Depends(require_admin)],
        tags=[WEBHOOK.name],
        summary="Recent delivery attempts of a Webhook",
    )
    async def deliveries(ref: str, request: Request) -> dict[str, Any]:
        """``{"items": [{"id", "event_id", "type", "attempt", "status_code" (null on a timeout or
        connection error), "latency_ms", "error", "created_at", "next_attempt_at" (null once delivered
        or failed)}]}``, most recent first; ``limit`` 1–1000 (default 50)."""
        params = single_params(request.query_params.multi_items(), frozenset({"limit"}))
        return await deliveries_of.recent(ref, params)
