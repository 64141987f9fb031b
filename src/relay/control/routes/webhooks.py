"""``GET /api/webhooks/{ref}/deliveries`` (SPEC §10.10): a webhook's recent delivery attempts.

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

    def table(self) -> list[Route]:
        summary = "Recent delivery attempts of a Webhook"
        return [
            Route("GET", "/api/webhooks/{ref}/deliveries", self.deliveries, WEBHOOK.name, summary=summary)
        ]


def mount_webhook_routes(app: FastAPI, deliveries_of: WebhookDeliveries, require_admin: Any) -> None:
    mount(app, WebhookRoutes(deliveries_of).table(), require_admin)
