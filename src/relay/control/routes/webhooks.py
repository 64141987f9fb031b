"""``GET /api/webhooks/{ref}/deliveries`` (SPEC §10.10): a webhook's recent delivery attempts; ``POST
/api/webhooks/{ref}/test`` and ``POST /api/webhooks/{ref}/events/{event_id}/redeliver`` (SPEC §16: an
operator sends a test event, or an event again).

Thin: refuses unknown or repeated query parameters, asks :class:`WebhookDeliveries`, answers what it
renders. The CRUD of the kind itself is the generic one (``routes.catalog``). Admin bearer only.
"""

from typing import Any

from fastapi import FastAPI, Request

from relay.control.kinds import WEBHOOK
from relay.control.query import single_params
from relay.control.routes.table import Route, mount
from relay.control.services.webhooks import WebhookDeliveries


class WebhookRoutes:
    def __init__(self, deliveries_of: WebhookDeliveries) -> None:
        self._deliveries_of = deliveries_of

    async def deliveries(self, ref: str, request: Request) -> dict[str, Any]:
        """``{"items": [{"id", "event_id", "type", "attempt", "status_code" (null on a timeout or
        connection error), "latency_ms", "error", "created_at", "next_attempt_at" (null once delivered
        or failed)}]}``, most recent first; ``limit`` 1–1000 (default 50)."""
        params = single_params(request.query_params.multi_items(), frozenset({"limit"}))
        return await self._deliveries_of.recent(ref, params)

    async def test(self, ref: str) -> dict[str, Any]:
        """Queue a signed ``webhook.test`` event for the webhook, due now, whatever its ``events``:
        ``{"event_id", "type": "webhook.test", "state": "pending"}``. Its attempts appear among the
        deliveries. 409 when the webhook is disabled."""
        return await self._deliveries_of.send_test(ref)

    async def redeliver(self, ref: str, event_id: str) -> dict[str, Any]:
        """Send a delivered or failed event again, due now, with the same body and ``webhook-id`` (a
        receiver that dedupes by it sees a repeat): ``{"event_id", "type", "state": "pending"}``. 404 for an
        event the webhook does not have; 409 while the event is still pending, or the webhook disabled."""
        return await self._deliveries_of.redeliver(ref, event_id)

    def table(self) -> list[Route]:
        tag = WEBHOOK.name
        return [
            Route(
                "GET",
                "/api/webhooks/{ref}/deliveries",
                self.deliveries,
                tag,
                summary="Recent delivery attempts of a Webhook",
            ),
            Route("POST", "/api/webhooks/{ref}/test", self.test, tag, 202, "Send a Webhook a test event"),
            Route(
                "POST",
                "/api/webhooks/{ref}/events/{event_id}/redeliver",
                self.redeliver,
                tag,
                202,
                "Send a Webhook's event again",
            ),
        ]


def mount_webhook_routes(app: FastAPI, deliveries_of: WebhookDeliveries, require_admin: Any) -> None:
    mount(app, WebhookRoutes(deliveries_of).table(), require_admin)
