"""The confirm step of destructive dashboard actions (SPEC §16 "destructive actions confirmed").

A delete, revoke or cancel button never acts on its first click: its POST, without ``confirm=yes``,
answers this page, which names what goes and what follows, and carries its own form (with the CSRF
token and ``confirm=yes``) that does it. "No, keep it" is a plain link back: nothing changes.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.session import Viewer
from relay.control.dashboard.web import Dashboard


def confirm_page(
    dash: Dashboard,
    request: Request,
    viewer: Viewer,
    *,
    heading: str,
    consequence: str,
    action: str,
    verb: str,
    back: str,
    error: str | None = None,
    status: int = 200,
) -> Response:
    return dash.page(
        "confirm.html",
        request,
        viewer,
        status,
        heading=heading,
        consequence=consequence,
        action=action,
        verb=verb,
        back=back,
        error=error,
    )


def confirm_revoke(
    dash: Dashboard, request: Request, viewer: Viewer, key: dict[str, Any], *, action: str, back: str
) -> Response:
    """Ask before revoking a relay key (revoking cannot be undone)."""
    return confirm_page(
        dash,
        request,
        viewer,
        heading=f"Revoke key {key['name']}?",
        consequence=f"Requests with the key {key['prefix']}… are refused from now on; this cannot be undone.",
        action=action,
        verb="Revoke",
        back=back,
    )


def confirm_cancel(dash: Dashboard, request: Request, viewer: Viewer, batch_id: str) -> Response:
    """Ask before cancelling a batch (its unfinished items end as cancelled; it cannot be resumed)."""
    return confirm_page(
        dash,
        request,
        viewer,
        heading=f"Cancel batch {batch_id}?",
        consequence="Its items that have not finished end as cancelled; the batch cannot be resumed.",
        action=f"/ui/batches/{batch_id}/cancel",
        verb="Cancel batch",
        back=f"/ui/batches/{batch_id}",
    )
