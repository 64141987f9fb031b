"""Webhooks and their deliveries in the catalog and health area (SPEC §16 with §10.10), admin only as
``/api/webhooks`` is: a user signed in with email and password gets 403, as the API refuses them.

The catalog page lists each webhook (url, project, events, enabled; never its secret, which the
catalog service never renders) with its latest delivery attempt; ``/ui/webhooks/{ref}`` shows the
webhook's recent attempts exactly as ``GET /api/webhooks/{ref}/deliveries`` answers them (status code,
attempt, error, next attempt), through the same service.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.control.kinds import WEBHOOK
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


async def webhook(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    if dash.webhooks is None:
        raise Refused(404, "webhook deliveries are not available here")
    hook = await dash.catalog.get(WEBHOOK, request.path_params["ref"])  # 404 for an unknown one
    found = await dash.webhooks.recent(hook["id"], {"limit": RECENT})
    return dash.page("webhook.html", request, viewer, hook=hook, deliveries=found["items"], outcome=outcome)


ROUTES: Final[PageRoutes] = [("/ui/webhooks/{ref}", webhook, ("GET",))]
