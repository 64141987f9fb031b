"""The catalog editor (SPEC §16): the admin creates, edits and deletes every kind of §2 at
``/ui/edit/<plural>``.

Each write is one call of :class:`relay.control.services.catalog.CatalogService`, the object the
``/api/<plural>`` routes call: the same validation, the same 400/409/422 messages (shown in an alert
next to the form, with what was typed kept), the same audit entry with the admin as actor, the same
snapshot reload. The forms themselves are data (``edit_forms``). Deleting takes two steps: the delete
button opens a page that names what goes and asks again; only its own form (``confirm=yes``) deletes.
"""

from __future__ import annotations

from typing import Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.confirm import confirm_page
from relay.control.dashboard.edit_forms import FORMS, TITLES, body_of, echoed, shown
from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.control.kinds import BY_PLURAL, Kind
from relay.errors import RelayError


def _kind(request: Request) -> tuple[str, Kind]:
    plural = request.path_params["plural"]
    if plural not in FORMS:
        raise Refused(404, f"no such catalog kind {plural!r}")
    return plural, BY_PLURAL[plural]


async def _choices(dash: Dashboard, plural: str) -> dict[str, list[str]]:
    """Names the form's reference fields offer (a datalist: typing any name or id still works)."""
    wanted = {f.ref for f in FORMS[plural] if f.ref}
    return {ref: [o["name"] for o in await dash.catalog.list_all(BY_PLURAL[ref])] for ref in sorted(wanted)}


async def index(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    counts = {plural: len(await dash.catalog.list_all(BY_PLURAL[plural])) for plural in FORMS}
    return dash.page("edit_index.html", request, viewer, titles=TITLES, counts=counts)


async def kind_page(
    dash: Dashboard,
    request: Request,
    *,
    values: dict[str, str] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    return dash.page(
        "edit_kind.html",
        request,
        viewer,
        status,
        plural=plural,
        title=TITLES[plural][0],
        titles=TITLES[plural][1],
        items=await dash.catalog.list_all(kind),
        fields=FORMS[plural],
        values=values or {"enabled": "on"},
        choices=await _choices(dash, plural),
        error=error,
    )


async def listing(dash: Dashboard, request: Request) -> Response:
    return await kind_page(dash, request)


async def create(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    posted = await dash.form(request, viewer)
    try:
        created = await dash.catalog.create(kind, body_of(plural, posted))
    except RelayError as exc:
        values = echoed(plural, posted)
        return await kind_page(dash, request, values=values, error=exc.message, status=exc.status)
    return await object_page(dash, request, created["name"], notice="created", secret=created.get("secret"))


async def object_page(
    dash: Dashboard,
    request: Request,
    ref: str,
    *,
    values: dict[str, str] | None = None,
    notice: str | None = None,
    secret: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    current = await dash.catalog.get(kind, ref)
    return dash.page(
        "edit_object.html",
        request,
        viewer,
        status,
        plural=plural,
        title=TITLES[plural][0],
        titles=TITLES[plural][1],
        current=current,
        fields=FORMS[plural],
        values=values or shown(plural, current),
        choices=await _choices(dash, plural),
        notice=notice,
        secret=secret,
        error=error,
    )


async def edit(dash: Dashboard, request: Request) -> Response:
    return await object_page(dash, request, request.path_params["ref"])


async def update(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    posted = await dash.form(request, viewer)
    ref = request.path_params["ref"]
    try:
        updated = await dash.catalog.patch(kind, ref, body_of(plural, posted))
    except RelayError as exc:
        values = echoed(plural, posted)
        return await object_page(dash, request, ref, values=values, error=exc.message, status=exc.status)
    return await object_page(dash, request, updated["name"], notice="saved")


async def confirm_delete(
    dash: Dashboard, request: Request, error: str | None = None, status: int = 200
) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    current = await dash.catalog.get(kind, request.path_params["ref"])
    return confirm_page(
        dash,
        request,
        viewer,
        heading=f"Delete {TITLES[plural][0].lower()} {current['name']}?",
        consequence="It is removed from the catalog; this cannot be undone. "
        "Objects that still refer to it must be changed first.",
        action=f"/ui/edit/{plural}/{current['id']}/delete",
        verb="Delete",
        back=f"/ui/edit/{plural}/{current['id']}",
        error=error,
        status=status,
    )


async def delete(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    plural, kind = _kind(request)
    posted = await dash.form(request, viewer)
    if posted.get("confirm") != "yes":
        return await confirm_delete(dash, request)
    try:
        await dash.catalog.delete(kind, request.path_params["ref"])
    except RelayError as exc:
        return await confirm_delete(dash, request, error=exc.message, status=exc.status)
    return dash.redirect(f"/ui/edit/{plural}?deleted=1")


async def revoke_tokens(dash: Dashboard, request: Request) -> Response:
    """``POST /api/users/{id}/revoke-tokens`` from the user's page: every inference token the user
    holds stops working (SPEC §3.2); asked first, like any action that cannot be undone."""
    viewer = await dash.require(request, admin=True)
    posted = await dash.form(request, viewer)
    if request.path_params["plural"] != "users":
        raise Refused(404, "only a user has inference tokens")
    user = await dash.catalog.get(BY_PLURAL["users"], request.path_params["ref"])
    if posted.get("confirm") != "yes":
        return confirm_page(
            dash,
            request,
            viewer,
            heading=f"Revoke every inference token of user {user['name']}?",
            consequence="Every token minted for this user so far is refused from now on; "
            "new ones can be minted.",
            action=f"/ui/edit/users/{user['id']}/revoke-tokens",
            verb="Revoke all tokens",
            back=f"/ui/edit/users/{user['id']}",
        )
    await dash.tokens.revoke_all(user["id"])
    return await object_page(dash, request, user["id"], notice="had every inference token revoked")


ROUTES: Final[PageRoutes] = [
    ("/ui/edit/{plural}/{ref}/revoke-tokens", revoke_tokens, ("POST",)),
    ("/ui/edit", index, ("GET",)),
    ("/ui/edit/{plural}", listing, ("GET",)),
    ("/ui/edit/{plural}", create, ("POST",)),
    ("/ui/edit/{plural}/{ref}", edit, ("GET",)),
    ("/ui/edit/{plural}/{ref}", update, ("POST",)),
    ("/ui/edit/{plural}/{ref}/delete", confirm_delete, ("GET",)),
    ("/ui/edit/{plural}/{ref}/delete", delete, ("POST",)),
]
