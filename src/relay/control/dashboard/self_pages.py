"""Self-service for a user signed in with email and password (SPEC §16, §3): at ``/ui/me`` they see
their own relay keys, create one (the plaintext shown in that one answer only) and revoke one (a
confirm step first), mint an inference token for one of their projects, and read their own usage and
spend.

Every action is the control plane's own service call with the principal pinned to the signed-in user:
a user can never name another principal, and a key that is not theirs answers 404 as if it did not
exist. The services then apply the API's rules (membership of the project, ``ttl_seconds`` range,
expiry format), so a refusal reads exactly as the API's. The admin has no ``/ui/me``: they manage
every key at ``/ui/keys``.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.confirm import confirm_revoke
from relay.control.dashboard.session import Viewer
from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.errors import RelayError


async def _user(dash: Dashboard, request: Request) -> Viewer:
    viewer = await dash.require(request)
    if viewer.is_admin:
        raise Refused(403, "this page is a user's own: the admin manages every key at /ui/keys")
    return viewer


def _project(viewer: Viewer, wanted: str) -> str:
    """The project id of one of the viewer's projects (by id or name); 403 for any other."""
    for project_id, name in viewer.projects:
        if wanted in (project_id, name):
            return project_id
    raise Refused(403, f"project: you are not a member of project {wanted!r}")


async def own_keys(dash: Dashboard, viewer: Viewer) -> list[dict[str, Any]]:
    return [
        k
        for k in await dash.keys.list_all()
        if k["principal_kind"] == "user" and k["principal_id"] == viewer.user_id
    ]


async def me_page(
    dash: Dashboard,
    request: Request,
    *,
    created: dict[str, Any] | None = None,
    token: dict[str, Any] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    viewer = await _user(dash, request)
    spend = await dash.usage.summary({"group_by": "model", "principal_id": str(viewer.user_id)})
    return dash.page(
        "me.html",
        request,
        viewer,
        status,
        keys=await own_keys(dash, viewer),
        projects=viewer.projects,
        created=created,
        token=token,
        error=error,
        spend=spend["rows"],
    )


async def me(dash: Dashboard, request: Request) -> Response:
    return await me_page(dash, request)


async def create_key(dash: Dashboard, request: Request) -> Response:
    viewer = await _user(dash, request)
    posted = await dash.form(request, viewer)
    payload: dict[str, Any] = {"principal_kind": "user", "principal": viewer.user_id}
    for name in ("name", "expires_at"):
        if posted.get(name, "").strip():
            payload[name] = posted[name].strip()
    try:
        payload["project"] = _project(viewer, posted.get("project", ""))
        answer = await dash.keys.create(payload)
    except (RelayError, Refused) as exc:
        return await me_page(dash, request, error=exc.message, status=exc.status)
    return await me_page(dash, request, created=answer, status=201)


async def _own_key(dash: Dashboard, viewer: Viewer, key_id: str) -> dict[str, Any]:
    for key in await own_keys(dash, viewer):
        if key["id"] == key_id:
            return key
    raise Refused(404, f"key {key_id!r} not found")


async def revoke_key(dash: Dashboard, request: Request) -> Response:
    viewer = await _user(dash, request)
    posted = await dash.form(request, viewer)
    key = await _own_key(dash, viewer, request.path_params["key_id"])
    if posted.get("confirm") != "yes":
        return confirm_revoke(
            dash, request, viewer, key, action=f"/ui/me/keys/{key['id']}/revoke", back="/ui/me"
        )
    await dash.keys.revoke(key["id"])
    return dash.redirect("/ui/me")


async def mint_token(dash: Dashboard, request: Request) -> Response:
    viewer = await _user(dash, request)
    posted = await dash.form(request, viewer)
    ttl = posted.get("ttl_seconds", "").strip() or "3600"
    payload = {"project": posted.get("project", ""), "ttl_seconds": int(ttl) if ttl.isdigit() else ttl}
    try:
        token = await dash.tokens.mint_for_session(viewer.cookie.removeprefix("u."), payload)
    except RelayError as exc:
        return await me_page(dash, request, error=exc.message, status=exc.status)
    return await me_page(dash, request, token=token, status=201)


ROUTES: Final[PageRoutes] = [
    ("/ui/me", me, ("GET",)),
    ("/ui/me/keys", create_key, ("POST",)),
    ("/ui/me/keys/{key_id}/revoke", revoke_key, ("POST",)),
    ("/ui/me/tokens", mint_token, ("POST",)),
]
