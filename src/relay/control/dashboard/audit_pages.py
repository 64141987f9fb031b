"""The audit page (SPEC §21 through §16): ``GET /api/audit`` as a filterable, paged table for operators,
and the chain's verification on demand. Admin only, as the API is: a user signed in with email and
password gets 403.

The filters go to :class:`relay.control.audit.queries.AuditQueries` as given, so a bad one is refused
with the API's message (shown as the error page). Verifying reads the whole log, so it runs when
asked (``?verify=1``), not on every view. Entries hold no secret (write-only fields are already
``"<redacted>"``), so the page shows before/after as stored.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.audit.queries import FILTERS
from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.domain.audit import ACTIONS

PAGE_SIZE: Final = "50"


def changed_fields(entry: dict[str, Any]) -> list[str]:
    """The fields an update changed (what an operator looks for first); [] for other actions."""
    before, after = entry.get("before") or {}, entry.get("after") or {}
    if not before or not after:
        return []
    return sorted(k for k in set(before) | set(after) if k != "updated_at" and before.get(k) != after.get(k))


async def audit(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    if dash.audit is None:
        raise Refused(404, "the audit log is not available here")
    filters = {k: v for k, v in request.query_params.items() if k in FILTERS and v}
    cursor = request.query_params.get("cursor") or None
    page = await dash.audit.list({**filters, "limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})})
    verdict = (await dash.audit.verify()).as_json() if request.query_params.get("verify") else None
    return dash.page(
        "audit.html",
        request,
        viewer,
        filters=filters,
        actions=ACTIONS,
        entries=page["items"],
        next_cursor=page["next_cursor"],
        verdict=verdict,
        changed=changed_fields,
    )


ROUTES: Final[PageRoutes] = [("/ui/audit", audit, ("GET",))]
