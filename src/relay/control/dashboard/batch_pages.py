"""The batch pages of the dashboard (SPEC §16): every batch the viewer may see, one batch with its
items and failures (each as a page and as the fragment the page polls), and the admin's cancel.

Every handler calls the services the control API's routes call (``BatchAdmin``, ``BatchService``), so
a filter the API refuses is refused here with the same message, and a user sees through them only what
the viewer's project scope lets through. ``batch_downloads`` serves the results.
"""

from __future__ import annotations

from typing import Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.confirm import confirm_cancel
from relay.control.dashboard.web import (
    Dashboard,
    PageRoutes,
    Refused,
    project_names,
    scoped_project,
    team_names,
)
from relay.control.services.batches import APIS
from relay.domain.batches import ITEM_STATES

BATCH_FILTERS = ("project", "team", "owner", "state", "api", "from", "to", "cursor")


async def _list(dash: Dashboard, request: Request, fragment: bool) -> Response:
    viewer = await dash.require(request)
    params = {k: v for k, v in request.query_params.items() if k in BATCH_FILTERS and v}
    if "project" in params:  # another's project is a 403, as on every page, not an empty list
        params = scoped_project(viewer, params)
    page = await dash.batches.list({**params, "limit": "50"}, viewer.scope)
    name = "_batch_rows.html" if fragment else "batches.html"
    names = await project_names(dash, viewer)
    return dash.page(
        name,
        request,
        viewer,
        params=params,
        page=page,
        projects=viewer.projects,
        names=names,
        owners=await dash.batches.owner_names([b["owner"] for b in page["items"]]),
        apis=APIS,
    )


async def batch_list(dash: Dashboard, request: Request) -> Response:
    return await _list(dash, request, False)


async def batch_rows(dash: Dashboard, request: Request) -> Response:
    return await _list(dash, request, True)


ITEM_PARAMS: Final = ("state", "error", "after")


async def _page(dash: Dashboard, request: Request, fragment: bool) -> Response:
    viewer = await dash.require(request)
    batch_id = request.path_params["batch_id"]
    batch = await dash.batches.detail(batch_id, viewer.scope)
    filters = {k: v for k, v in request.query_params.items() if k in ITEM_PARAMS and v}
    items = await dash.batches.items(batch_id, filters, viewer.scope)  # one page: never every item
    found = await dash.batches.results_source(batch_id, viewer.scope)
    source = {k: v for k, v in found.items() if k != "owner"}  # the raw owner is for reading files
    name = "_batch_detail.html" if fragment else "batch.html"
    names = await project_names(dash, viewer)
    return dash.page(
        name,
        request,
        viewer,
        batch=batch,
        source=source,
        items=items,
        filters=filters,
        item_states=ITEM_STATES,
        names=names,
        team_names=await team_names(dash, viewer),
        owners=await dash.batches.owner_names([batch["owner"]]),
    )


async def batch_page(dash: Dashboard, request: Request) -> Response:
    return await _page(dash, request, False)


async def batch_fragment(dash: Dashboard, request: Request) -> Response:
    return await _page(dash, request, True)


async def cancel(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    posted = await dash.form(request, viewer)
    batch_id = request.path_params["batch_id"]
    if not viewer.is_admin:
        raise Refused(403, "only the admin can cancel from the dashboard (the owner can use the batch API)")
    if posted.get("confirm") != "yes":  # cancelling cannot be undone: ask first
        return confirm_cancel(dash, request, viewer, batch_id)
    await dash.batches.cancel(batch_id, viewer.scope)
    return dash.redirect(f"/ui/batches/{batch_id}")


ROUTES: Final[PageRoutes] = [
    ("/ui/batches", batch_list, ("GET",)),
    ("/ui/fragments/batches", batch_rows, ("GET",)),
    ("/ui/batches/{batch_id}", batch_page, ("GET",)),
    ("/ui/fragments/batches/{batch_id}", batch_fragment, ("GET",)),
    ("/ui/batches/{batch_id}/cancel", cancel, ("POST",)),
]
