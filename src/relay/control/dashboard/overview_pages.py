"""The dashboard's overview (SPEC §16): the last hour per minute, requests per day, the top models and
projects over the last 14 days, and the batches running now (a fragment the page polls).

It reads through ``UsageQueries`` and ``BatchAdmin`` as the API's routes do, within the viewer's scope
(a user sees one of their projects). What it deliberately does not know: SQL, how charts are drawn.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard import charts
from relay.control.dashboard.web import Dashboard, PageRoutes, scoped_project

RUNNING: Final = {"state": "in_progress", "limit": "10"}
DAYS: Final = 14  # the day chart and the top models and projects cover the last 14 UTC days


async def overview(dash: Dashboard, request: Request) -> Response:
    """Every figure is one of the usage API's summaries, computed in the database over every event of
    its window (never a sample of recent events); the overview shows no latency, so none is sorted."""
    viewer = await dash.require(request)
    if not viewer.is_admin and not viewer.projects:  # signed in, no project yet: their own page
        return dash.redirect("/ui/me")
    params = scoped_project(viewer, dict(request.query_params))
    scope = {"project": params["project"]} if "project" in params else {}
    now = datetime.now(UTC)
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    first_day = (now - timedelta(days=DAYS - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    window = {**scope, "from": first_day.isoformat()}

    async def summary(group_by: str, extra: dict[str, str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = (
            await dash.usage.summary({**extra, "group_by": group_by}, latency=False)
        )["rows"]
        return rows

    series = charts.per_minute(await summary("minute", {**scope, "from": since.isoformat()}), now)
    breakdown = await dash.usage.breakdown(window)  # one scan, three groupings
    by_day, models, projects = breakdown["day"], breakdown["model"], breakdown["project"]
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
            charts.bars("Cost per minute, last hour", series["cost"], unit="usd"),
        ],
        day_chart=charts.bars(f"Requests per day, last {DAYS} days", day_points, axis="Day (UTC)"),
        days=DAYS,
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
