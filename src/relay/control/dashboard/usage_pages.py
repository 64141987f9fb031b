"""The usage page and its CSV download (SPEC §8 through §16): the usage API's filters as a form,
a chart and table grouped by model, project, team, policy or day, and the events themselves.

The filters go to :class:`relay.control.services.usage.UsageQueries` as given, so a bad one is refused
with the API's own message. The CSV pages through the same query (newest first) and streams, so a
large download never sits in memory; cells that a spreadsheet would run as a formula are quoted.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from relay.control.dashboard import charts
from relay.control.dashboard.web import HEADERS, Dashboard, PageRoutes, scoped_project

FILTERS: Final = (
    "source",
    "project",
    "team",
    "policy",
    "model",
    "host",
    "status_class",
    "error",
    "from",
    "to",
)
GROUPS: Final = ("model", "project", "team", "policy", "day")
CSV_COLUMNS: Final = (
    "ts",
    "request_id",
    "source",
    "batch_id",
    "batch_idx",
    "status",
    "error_kind",
    "model",
    "requested_model",
    "host",
    "project_id",
    "team_id",
    "policy_id",
    "principal_kind",
    "principal_id",
    "credential_kind",
    "credential_id",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_nanos",
    "latency_ms",
)
CSV_MAX_ROWS: Final = 1_000_000


def _filters(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k in FILTERS and v}


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


async def usage(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    filters = scoped_project(viewer, _filters(request))
    group_by = request.query_params.get("group_by") or "model"
    if group_by not in GROUPS:
        group_by = "model"
    cursor = request.query_params.get("cursor") or None
    summary = await dash.usage.summary({**filters, "group_by": group_by})
    events = await dash.usage.events({**filters, "limit": "50", **({"cursor": cursor} if cursor else {})})
    rows = summary["rows"]
    label = (
        (lambda r: r.get("name") or r["group"])
        if group_by in ("project", "team", "policy")
        else (lambda r: r["group"])
    )
    draw = charts.bars if group_by == "day" else charts.hbars  # named groups: labelled bars
    axis = "Day (UTC)" if group_by == "day" else group_by.capitalize()
    chart = draw(f"Requests by {group_by}", [(str(label(r)), float(r["requests"])) for r in rows], axis=axis)
    cost_chart = draw(
        f"Cost by {group_by}",
        [(str(label(r)), (r["cost_nanos"] or 0) / 1e9) for r in rows],
        unit="usd",
        axis=axis,
    )
    return dash.page(
        "usage.html",
        request,
        viewer,
        filters=filters,
        group_by=group_by,
        groups=GROUPS,
        rows=rows,
        label=label,
        charts=[chart, cost_chart],
        events=events,
        projects=viewer.projects,
    )


async def usage_csv(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    filters = scoped_project(viewer, _filters(request))
    first = await dash.usage.events({**filters, "limit": "1000"})  # a bad filter fails before headers

    async def body() -> AsyncIterator[bytes]:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_COLUMNS)
        page, sent = first, 0
        while True:
            for event in page["events"]:
                writer.writerow([_cell(event.get(c)) for c in CSV_COLUMNS])
            sent += len(page["events"])
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
            if page["next_cursor"] is None or sent >= CSV_MAX_ROWS:
                return
            page = await dash.usage.events({**filters, "limit": "1000", "cursor": page["next_cursor"]})

    headers = {**HEADERS, "content-disposition": 'attachment; filename="relay-usage.csv"'}
    return StreamingResponse(body(), media_type="text/csv; charset=utf-8", headers=headers)


ROUTES: Final[PageRoutes] = [
    ("/ui/usage", usage, ("GET",)),
    ("/ui/usage.csv", usage_csv, ("GET",)),
]
