"""Webhooks and their deliveries in the catalog and health area (SPEC §16 with §10.10), admin only as
``/api/webhooks`` is: a user signed in with email and password gets 403, as the API refuses them.

The catalog page lists each webhook (url, project, events, enabled; never its secret, which the
catalog service never renders) with its latest delivery attempt; ``/ui/webhooks/{ref}`` shows the
webhook's recent attempts exactly as ``GET /api/webhooks/{ref}/deliveries`` answers them (status code,
attempt, error, next attempt), through the same service, with a **Send test event** button and a
**Redeliver** button per event: posted forms (CSRF-checked) that call the service behind ``POST
/api/webhooks/{ref}/test`` and ``…/events/{event_id}/redeliver``, then show the page again saying what
was queued (a refusal, such as a disabled webhook's 409, is the error page with the API's message).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.control.kinds import WEBHOOK
from relay.control.services.webhooks import WebhookDeliveries
from relay.errors import NotFound

RECENT: Final = "50"


def outcome(delivery: dict[str, Any]) -> str:
    """One attempt in a word: what the receiver's answer (or its absence) meant for the event —
    ``delivered`` (2xx), ``retrying`` (another attempt is scheduled) or ``failed`` (none is)."""
    code = delivery["status_code"]
    if code is not None and 200 <= code < 300:
        return "delivered"
    return "retrying" if delivery["next_attempt_at"] else "failed"


async def latest_deliveries(dash: Dashboard, webhooks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Webhook id → its most recent attempt (webhooks never attempted are absent)."""
    if dash.webhooks is None:
        return {}
    out = {}
    for hook in webhooks:
        try:
            items = (await dash.webhooks.recent(hook["id"], {"limit": "1"}))["items"]
        except NotFound:  # deleted since the list was read: the page shows the rest
            continue
        if items:
            out[hook["id"]] = items[0]
    return out


def _deliveries(dash: Dashboard) -> WebhookDeliveries:
    if dash.webhooks is None:
        raise Refused(404, "webhook deliveries are not available here")
    return dash.webhooks


async def webhook(dash: Dashboard, request: Request, notice: str | None = None) -> Response:
    viewer = await dash.require(request, admin=True)
    deliveries = _deliveries(dash)
    hook = await dash.catalog.get(WEBHOOK, request.path_params["ref"])  # 404 for an unknown one
    found = await deliveries.recent(hook["id"], {"limit": RECENT})
    return dash.page(
        "webhook.html", request, viewer, hook=hook, deliveries=found["items"], outcome=outcome, notice=notice
    )


async def send_test(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    await dash.form(request, viewer)
    queued = await _deliveries(dash).send_test(request.path_params["ref"])
    return await webhook(dash, request, f"Test event {queued['event_id']} queued: it is sent within seconds.")


async def redeliver(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    await dash.form(request, viewer)
    queued = await _deliveries(dash).redeliver(request.path_params["ref"], request.path_params["event_id"])
    return await webhook(dash, request, f"Event {queued['event_id']} queued again.")


ROUTES: Final[PageRoutes] = [
    ("/ui/webhooks/{ref}", webhook, ("GET",)),
    ("/ui/webhooks/{ref}/test", send_test, ("POST",)),
    ("/ui/webhooks/{ref}/events/{event_id}/redeliver", redeliver, ("POST",)),
]
