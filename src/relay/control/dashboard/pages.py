"""Sign-in, the overview and the batch pages of the dashboard (SPEC §16).

Every handler calls the services the control API's routes call (``BatchAdmin``, ``UsageQueries``,
``TokenService``), so a filter the API refuses is refused here with the same message, and a user sees
through them only what the viewer's project scope lets through.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from relay.control.dashboard import charts
from relay.control.dashboard.session import ADMIN_TTL_S, COOKIE, Viewer
from relay.control.dashboard.web import Dashboard, Refused, with_errors
from relay.control.kinds import PROJECT
from relay.control.services.batches import APIS
from relay.crypto.sealing import constant_time_equal
from relay.errors import RelayError

PRE_COOKIE = "relay_ui_pre"  # the sign-in form's CSRF basis, before any session exists
BATCH_FILTERS = ("project", "team", "owner", "state", "api", "from", "to", "cursor")


def scoped_project(viewer: Viewer, params: dict[str, str]) -> dict[str, str]:
    """A user's reads are pinned to one of their projects (the one asked for, else their first)."""
    if viewer.is_admin:
        return params
    if not viewer.projects:
        raise Refused(403, "you are not a member of any project")
    wanted = params.get("project") or viewer.projects[0][0]
    for project_id, name in viewer.projects:
        if wanted in (project_id, name):
            return {**params, "project": project_id}
    raise Refused(403, f"you are not a member of project {wanted!r}")


async def project_names(dash: Dashboard, viewer: Viewer) -> dict[str, str]:
    """Project id → name for what the viewer may see (batches record ids; names read better)."""
    if not viewer.is_admin:
        return dict(viewer.projects)
    return {p["id"]: p["name"] for p in await dash.catalog.list_all(PROJECT)}


def mount_pages(router: APIRouter, dash: Dashboard) -> None:
    def cookie(response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path="/ui",
            httponly=True,
            samesite="strict",
            secure=dash.secure_cookies,
        )

    async def signin_page(request: Request, status: int = 200, message: str | None = None) -> Response:
        pre = request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(16)
        response = dash.page(
            "signin.html", request, None, status, csrf=dash.signer.csrf(pre), message=message
        )
        cookie(response, PRE_COOKIE, pre, 3600)
        return response

    async def signin(request: Request) -> Response:
        if request.method == "GET":
            if await dash.viewer(request) is not None:
                return dash.redirect("/ui/")
            return await signin_page(request)
        try:
            fields = await dash.form(request, pre=request.cookies.get(PRE_COOKIE))
        except Refused as exc:
            return await signin_page(request, exc.status, exc.message)
        # Guesses are throttled as on POST /api/auth/login, with the same counts, each counted before
        # anything is compared: per email and per client address; admin-token guesses per address only
        # (under one shared name anyone could lock the operator out of every replica).
        address = request.client.host if request.client else "unknown"
        admin_token = fields.get("admin_token", "")
        email = None if admin_token else fields.get("email", "")[:320]
        try:
            attempt = await dash.login_throttle.attempt(email, address)
        except RelayError as exc:
            return await signin_page(request, exc.status, exc.message)
        if admin_token:
            if not constant_time_equal(admin_token.strip(), dash.admin_token):
                return await signin_page(request, 401, "invalid admin token")  # stays counted
            value, max_age = dash.signer.admin_cookie(), ADMIN_TTL_S
        else:
            try:
                session = await dash.tokens.login({"email": email, "password": fields.get("password", "")})
            except RelayError as exc:
                if exc.status != 401:  # not a wrong guess
                    await dash.login_throttle.refund(attempt)
                return await signin_page(request, exc.status, exc.message)
            except Exception:
                await dash.login_throttle.refund(attempt)
                raise
            value, max_age = "u." + session, 12 * 3600
        await dash.login_throttle.succeeded(attempt)
        response = dash.redirect("/ui/")
        cookie(response, COOKIE, value, max_age)
        response.delete_cookie(PRE_COOKIE, path="/ui")
        return response

    async def signout(request: Request) -> Response:
        viewer = await dash.require(request)
        await dash.form(request, viewer)
        if not viewer.is_admin:
            await dash.tokens.end_session(viewer.cookie[2:])
        response = dash.redirect("/ui/signin")
        response.delete_cookie(COOKIE, path="/ui")
        return response

    async def overview(request: Request) -> Response:
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
        running = await dash.batches.list({"state": "in_progress", "limit": "10"}, viewer.scope)
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

    async def running(request: Request) -> Response:
        viewer = await dash.require(request)
        found = await dash.batches.list({"state": "in_progress", "limit": "10"}, viewer.scope)
        return dash.page("_running.html", request, viewer, running=found["items"])

    async def _list(request: Request, fragment: bool) -> Response:
        viewer = await dash.require(request)
        params = {k: v for k, v in request.query_params.items() if k in BATCH_FILTERS and v}
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
            apis=APIS,
        )

    async def batch_list(request: Request) -> Response:
        return await _list(request, False)

    async def batch_rows(request: Request) -> Response:
        return await _list(request, True)

    async def _page(request: Request, fragment: bool) -> Response:
        viewer = await dash.require(request)
        batch_id = request.path_params["batch_id"]
        batch = await dash.batches.detail(batch_id, viewer.scope)
        items: list[Any] = []
        if not fragment or batch["state"] == "in_progress" or request.query_params.get("items"):
            items = await dash.batch_service.item_states(batch_id)
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
            items=items[:2000],
            more=len(items) > 2000,
            names=names,
        )

    async def batch_page(request: Request) -> Response:
        return await _page(request, False)

    async def batch_fragment(request: Request) -> Response:
        return await _page(request, True)

    async def cancel(request: Request) -> Response:
        viewer = await dash.require(request)
        await dash.form(request, viewer)
        batch_id = request.path_params["batch_id"]
        if not viewer.is_admin:
            raise Refused(
                403, "only the admin can cancel from the dashboard (the owner can use the batch API)"
            )
        await dash.batches.cancel(batch_id, viewer.scope)
        return dash.redirect(f"/ui/batches/{batch_id}")

    routes = [
        ("/ui/signin", signin, ["GET", "POST"]),
        ("/ui/signout", signout, ["POST"]),
        ("/ui/", overview, ["GET"]),
        ("/ui/fragments/running", running, ["GET"]),
        ("/ui/batches", batch_list, ["GET"]),
        ("/ui/fragments/batches", batch_rows, ["GET"]),
        ("/ui/batches/{batch_id}", batch_page, ["GET"]),
        ("/ui/fragments/batches/{batch_id}", batch_fragment, ["GET"]),
        ("/ui/batches/{batch_id}/cancel", cancel, ["POST"]),
    ]
    for path, handler, methods in routes:
        router.add_api_route(path, with_errors(dash, handler), methods=methods, include_in_schema=False)
