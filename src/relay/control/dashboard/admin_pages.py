"""The admin-only pages (SPEC §16): relay keys, and the catalog with each host key's breaker, its
webhooks with their latest delivery (``webhook_pages`` has each webhook's attempts), and each
policy's rules, current budget spend (as ``GET /api/policies/{ref}/spend`` answers it; a shared state
that does not answer shows as unknown, the page still renders), batch block (SPEC §17) and cache
block (SPEC §19), one line each; each binding's provider batch offload (SPEC §22).

Keys: create (the plaintext is in that one answer and nowhere else: the page is ``no-store`` and the
next visit shows only the prefix), rotate with a grace period, revoke, disable and enable, each
through :class:`relay.control.services.keys.KeyService` exactly as ``/api/keys`` does. A user signed in with
email and password gets 403 here, as the control API would refuse them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.confirm import confirm_revoke
from relay.control.dashboard.web import Dashboard, PageRoutes
from relay.control.dashboard.webhook_pages import latest_deliveries, outcome
from relay.control.kinds import BY_PLURAL
from relay.errors import RelayError
from relay.state import StateUnavailable

CATALOG_KINDS = ("hosts", "models", "bindings", "guardrails", "policies", "webhooks")


def key_state(key: dict[str, Any]) -> str:
    if key.get("revoked_at"):
        return "revoked"
    if not key.get("enabled"):
        return "disabled"
    if key.get("grace_until"):
        return "rotated (old value in grace)"
    return "active"


async def keys_page(
    dash: Dashboard,
    request: Request,
    *,
    created: dict[str, Any] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    viewer = await dash.require(request, admin=True)
    items = await dash.keys.list_all()
    accounts = await dash.catalog.list_all(BY_PLURAL["service-accounts"])
    users = await dash.catalog.list_all(BY_PLURAL["users"])
    policies = await dash.catalog.list_all(BY_PLURAL["policies"])
    return dash.page(
        "keys.html",
        request,
        viewer,
        status,
        keys=items,
        key_state=key_state,
        created=created,
        error=error,
        accounts=accounts,
        users=users,
        policies=policies,
    )


async def keys(dash: Dashboard, request: Request) -> Response:
    return await keys_page(dash, request)


async def create(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    fields = await dash.form(request, viewer)
    payload: dict[str, Any] = {
        "principal_kind": fields.get("principal_kind", ""),
        "principal": fields.get("principal", ""),
    }
    for name in ("policy", "name", "expires_at", "project"):
        if fields.get(name):
            payload[name] = fields[name]
    try:
        answer = await dash.keys.create(payload)
    except RelayError as exc:
        return await keys_page(dash, request, error=exc.message, status=exc.status)
    return await keys_page(dash, request, created={"action": "created", **answer}, status=201)


async def act(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    fields = await dash.form(request, viewer)
    key_id, action = request.path_params["key_id"], request.path_params["action"]
    try:
        if action == "rotate":
            grace = fields.get("grace_seconds") or "0"
            answer = await dash.keys.rotate(
                key_id, {"grace_seconds": int(grace) if grace.isdigit() else grace}
            )
            return await keys_page(dash, request, created={"action": "rotated", **answer})
        if action == "revoke" and fields.get("confirm") != "yes":
            key = await dash.keys.get(key_id)
            return confirm_revoke(
                dash, request, viewer, key, action=f"/ui/keys/{key_id}/revoke", back="/ui/keys"
            )
        if action == "revoke":
            await dash.keys.revoke(key_id)
        elif action in ("disable", "enable"):
            await dash.keys.patch(key_id, {"enabled": action == "enable"})
        else:
            return await keys_page(dash, request, error=f"unknown action {action!r}", status=404)
    except RelayError as exc:
        return await keys_page(dash, request, error=exc.message, status=exc.status)
    return dash.redirect("/ui/keys")


async def catalog(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request, admin=True)
    lists = {plural: await dash.catalog.list_all(BY_PLURAL[plural]) for plural in CATALOG_KINDS}
    health = await dash.health.host_keys()
    spend, spend_unknown = await _spend(dash, lists["policies"])
    latest = await latest_deliveries(dash, lists["webhooks"])
    return dash.page(
        "catalog.html",
        request,
        viewer,
        lists=lists,
        health=health,
        spend=spend,
        spend_unknown=spend_unknown,
        latest=latest,
        outcome=outcome,
        batch_summary=batch_summary,
        cache_summary=cache_summary,
        offload_summary=offload_summary,
        matcher_summary=matcher_summary,
    )


def batch_summary(block: Mapping[str, Any] | None) -> str:
    """A policy's ``batch`` block in a table cell (SPEC §17): ``fail`` for the defaults, else its
    pacing and whatever it sets, e.g. ``wait · live 20% · max 8 · translate``."""
    if not block:
        return "fail"
    parts = [str(block.get("pacing") or "fail")]
    if block.get("live_reserve"):
        parts.append(f"live {float(block['live_reserve']) * 100:.4g}%")
    if block.get("max_concurrency") is not None:
        parts.append(f"max {block['max_concurrency']}")
    if block.get("translate"):
        parts.append("translate")
    return " · ".join(parts)


def cache_summary(block: Mapping[str, Any] | None) -> str:
    """A policy's ``cache`` block in a table cell (SPEC §19): ``off``, else its TTL, scope and, when
    streamed requests bypass it, ``no streams``, e.g. ``1h · credential · no streams``."""
    if not block:
        return "off"
    parts = [str(block.get("ttl")), str(block.get("scope") or "project")]
    if block.get("streams") is False:
        parts.append("no streams")
    return " · ".join(parts)


def offload_summary(block: Mapping[str, Any] | None) -> str:
    """A binding's ``batch_offload`` block in a table cell (SPEC §22): ``never`` unless its mode is
    native, else from how many items and at what share of the price, e.g. ``native · ≥ 100 items · 50%``."""
    if not block or block.get("mode") != "native":
        return "never"
    return f"native · ≥ {block.get('min_items')} items · {float(block.get('discount', 0)) * 100:.4g}%"


def matcher_summary(guardrail: Mapping[str, Any]) -> str:
    """A guardrail's matcher in a table cell (SPEC §20): its patterns, PII types, or webhook URL and fail
    mode, e.g. ``pii: email, phone`` or ``webhook: https://… (fail closed)``."""
    if guardrail.get("regex"):
        return "regex: " + ", ".join(guardrail["regex"])
    if guardrail.get("pii"):
        return "pii: " + ", ".join(guardrail["pii"])
    hook = guardrail.get("webhook") or {}
    return f"webhook: {hook.get('url')} (fail {hook.get('fail')}, {hook.get('timeout_ms')} ms)"


async def _spend(dash: Dashboard, policies: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """Policy id → its budget rules' spend, for the policies that have budget rules; and whether the
    shared state failed to answer (then the spend is unknown, not zero)."""
    spend: dict[str, Any] = {}
    if dash.spend is None:
        return spend, False
    for policy in policies:
        rules = (policy.get("rate_limit") or {}).get("rules", [])
        if not any(rule.get("meter") == "cost_usd" for rule in rules):
            continue
        try:
            spend[policy["id"]] = await dash.spend(policy["id"])
        except StateUnavailable:
            return {}, True
        except RelayError:
            continue  # created a moment ago: not in this replica's snapshot yet
    return spend, False


ROUTES: Final[PageRoutes] = [
    ("/ui/keys", keys, ("GET",)),
    ("/ui/keys", create, ("POST",)),
    ("/ui/keys/{key_id}/{action}", act, ("POST",)),
    ("/ui/catalog", catalog, ("GET",)),
]
