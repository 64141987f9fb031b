"""The dashboard's overview (SPEC §16): the last hour per minute, requests per day, the top models and
projects, and the batches running now (a fragment the page polls).

It reads through ``UsageQueries`` and ``BatchAdmin`` as the API's routes do, within the viewer's scope
(a user sees one of their projects). What it deliberately does not know: SQL, how charts are drawn.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard import charts
from relay.control.dashboard.web import Dashboard, PageRoutes, scoped_project

RUNNING: Final = {"state": "in_progress", "limit": "10"}


async def overview(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    params = scoped_project(viewer, dict(request.query_params))
    scope = {"project": params["project"]} if "project" in params else {}
    now = datetime.now(UTC)
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    recent = await dash.usage.events({**scope, "from": since.isoformat(), "limit": "1000"})
    series = charts.per_minute(recent["events"], now)
    by_day = (await dash.usage.summary({**scope, "group_by": "day"}))["rows"][-14:]
    models = (await dash.usage.summary({**scope, "group_by": "model"}))["rows"]
    projects = (await dash.usage.summary({**scope, "group_by": "project"}))["rows"]
    running = await dash.batches.list(dict(RUNNING), viewer.scope)
    day_points = [(str(r["group"]), float(r["requests"])) for r in by_day]
    return dash.page(
        "overview.html",
        request,
        viewer,
        params=params,
        charts=[
            charts.bars("Requests per minute, last hour", series["requests"]),
            charts.bars("Errors per minute, last hour", series["errors"]),
            charts.bars("Tokens per minute, last hour", series["tokens"]),
            charts.bars("Cost (USD) per minute, last hour", series["cost"]),
        ],
        day_chart=charts.bars("Requests per day", day_points),
        by_day=by_day,
        truncated=recent["next_cursor"] is not None,
        top_models=sorted(models, key=lambda r: -r["requests"])[:5],
        top_projects=sorted(projects, key=lambda r: -r["requests"])[:5],
        running=running["items"],
    )


async def running(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    found = await dash.batches.list(dict(RUNNING), viewer.scope)
    return dash.page("_running.html", request, viewer, running=found["items"])


ROUTES: Final[PageRoutes] = [
    ("/ui/", overview, ("GET",)),
    ("/ui/fragments/running", running, ("GET",)),
]
