"""A webhook's recent delivery attempts (SPEC §10.10), for ``GET /api/webhooks/{ref}/deliveries`` and
the dashboard's webhook pages alike, so both show (and refuse) exactly the same with no SQL of their own.

The webhook is found like any catalog object (name or id; 404 otherwise), ``limit`` is checked with the
listing rules of ``control.query`` (1–1000, default 50; anything else → 400 naming it), the attempts
come from ``store.webhooks`` most recent first and are rendered here.

The operator's two nudges, for ``POST /api/webhooks/{ref}/test`` and ``POST
/api/webhooks/{ref}/events/{event_id}/redeliver`` and the dashboard's buttons alike: a test event and
a redelivery are outbox rows like a batch's event (``relay.webhooks.outbox``), so they are signed,
retried, delivered by any replica and listed among the deliveries as real ones, and each is audited
in the transaction that writes it.

What it deliberately does not know: HTTP, or how deliveries are made (``relay.webhooks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.control.audit.log import AuditLog
from relay.control.kinds import WEBHOOK
from relay.control.query import parse_limit
from relay.control.services.catalog import CatalogService
from relay.domain.times import rfc3339
from relay.errors import Conflict, NotFound
from relay.store import webhooks as store
from relay.webhooks import outbox

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
    def __init__(self, catalog: CatalogService, engine: AsyncEngine, audit: AuditLog | None = None) -> None:
        self._catalog = catalog
        self._engine = engine
        self._audit = audit or catalog.audit

    async def recent(self, ref: str, params: Mapping[str, str]) -> dict[str, Any]:
        """The answer of ``GET /api/webhooks/{ref}/deliveries`` for the (already single) ``params``."""
        limit = parse_limit(params.get("limit"), default=DEFAULT_LIMIT, maximum=MAX_LIMIT)
        webhook = await self._catalog.get(WEBHOOK, ref)
        rows = await store.recent_deliveries(self._engine, webhook["id"], limit)
        return {"items": [render_delivery(row) for row in rows]}

    async def send_test(self, ref: str) -> dict[str, Any]:
        """Queue a ``webhook.test`` event for the webhook, due now: ``{"event_id", "type", "state"}``.
        A disabled webhook is a 409: its events are never attempted, so the test could only expire."""
        webhook = await self._enabled(ref, "send a test event")
        async with store.write(self._engine) as conn:
            event_id = await outbox.enqueue_test(conn, webhook["id"], webhook["name"])
            await self._audit.record(conn, "test", WEBHOOK.name, webhook["id"], after={"event_id": event_id})
        return {"event_id": event_id, "type": outbox.TEST_EVENT, "state": "pending"}

    async def redeliver(self, ref: str, event_id: str) -> dict[str, Any]:
        """Send one of the webhook's delivered or failed events again, due now, with the same body and
        ``webhook-id``: ``{"event_id", "type", "state": "pending"}``. An unknown event (or another webhook's)
        is a 404; an event still pending is a 409 (it is already going to be sent)."""
        webhook = await self._enabled(ref, "redeliver")
        async with store.write(self._engine) as conn:
            outcome, event_type = await store.requeue_event(conn, webhook["id"], event_id)
            if outcome == "missing":
                raise NotFound(f"webhook {webhook['name']} has no event {event_id!r}")
            if outcome == "pending":
                raise Conflict(f"event {event_id} is still pending: it will be attempted again on its own")
            await self._audit.record(
                conn, "redeliver", WEBHOOK.name, webhook["id"], after={"event_id": event_id}
            )
        return {"event_id": event_id, "type": event_type, "state": "pending"}

    async def _enabled(self, ref: str, what: str) -> dict[str, Any]:
        webhook = await self._catalog.get(WEBHOOK, ref)  # 404 for an unknown one
        if not webhook["enabled"]:
            raise Conflict(f"webhook {webhook['name']} is disabled: enable it to {what}")
        return webhook
