"""HTTP routes for usage events, their summary, captured payloads and the payload-logging setting
(SPEC §8, §9, §11).

Thin: parse and validate query parameters, call ``relay.store.usage``, render. Query parameters are
parsed by hand rather than declared one by one so that an unknown one is refused (400 naming it)
instead of silently ignored: a typo like ``?projcet=x`` must not answer with every project's events.

``project``, ``team`` and ``policy`` accept an id or a name. A name is resolved against the current
catalog; a value that matches no current object is used as an id as given, because events keep the
ids of objects deleted since (SPEC §2). ``model`` and ``host`` match the names recorded on the events.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Final

import orjson
from fastapi import Body, Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.query import (
    check_cursor,
    check_range,
    parse_choice,
    parse_limit,
    parse_timestamp,
    single_params,
)
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest, NotFound
from relay.store import catalog as catalog_store
from relay.store import tables as t
from relay.store import usage as store
from relay.store.catalog import Row, utcnow
from relay.usage.capture import MAX_MAX_BYTES, MIN_MAX_BYTES, SETTING_KEY, current_setting

REFS: Final[Mapping[str, Table]] = {"project": t.projects, "team": t.teams, "policy": t.policies}
PLAIN: Final[Mapping[str, str]] = {
    "model": "model",
    "host": "host",
    "principal_id": "principal_id",
    "credential_id": "credential_id",
    "batch_id": "batch_id",
}
FILTERS: Final = (
    "source",
    *REFS,
    *PLAIN,
    "status_class",
    "status",
    "error",
    "from",
    "to",
)
EVENT_PARAMS: Final = frozenset({*FILTERS, "limit", "cursor"})
SUMMARY_PARAMS: Final = frozenset({*FILTERS, "group_by"})
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000


class PayloadLoggingUpdate(BaseModel):
    """``PUT /api/settings/payload_logging``: ``max_bytes`` left out keeps the current cap."""

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool
    max_bytes: int | None = Field(None, ge=MIN_MAX_BYTES, le=MAX_MAX_BYTES)


def mount_usage_routes(
    app: FastAPI,
    *,
    engine: AsyncEngine,
    require_admin: Callable[..., Awaitable[None]],
    on_settings_change: Callable[[], Awaitable[object]],
) -> None:
    """Mount the usage API on the control app; ``on_settings_change`` runs after a settings write
    commits (it reloads this replica's snapshot; other replicas follow the revision the write bumped)."""
    admin = [Depends(require_admin)]
    queries = UsageQueries(engine)
    # The settings write reads before it writes: on SQLite its transaction must take the write lock up
    # front, or a usage-writer commit in between makes the lock upgrade fail at once ("database is
    # locked", which busy_timeout does not cover). Ignored on Postgres.
    writer = engine.execution_options(sqlite_begin="IMMEDIATE")

    @app.get(
        "/api/usage/events",
        dependencies=admin,
        tags=["Usage"],
        openapi_extra={"parameters": _documented(EVENT_PARAMS)},
    )
    async def list_events(request: Request) -> dict[str, Any]:
        """Usage events, newest first, one page at a time (``next_cursor`` is null on the last page)."""
        return await queries.events(_params(request, EVENT_PARAMS))

    @app.get(
        "/api/usage/summary",
        dependencies=admin,
        tags=["Usage"],
        openapi_extra={"parameters": _documented(SUMMARY_PARAMS)},
    )
    async def usage_summary(request: Request) -> dict[str, Any]:
        """Requests, errors, tokens, cost and p50/p95 latency per group, over the filtered events."""
        return await queries.summary(_params(request, SUMMARY_PARAMS))

    @app.get("/api/payloads/{request_id}", dependencies=admin, tags=["Usage"])
    async def get_payload(request_id: str) -> dict[str, Any]:
        """A live request's captured bodies: JSON when they parse, else text (SSE streams, truncated
        bodies)."""
        async with engine.connect() as conn:
            row = await store.get_payload(conn, request_id)
        if row is None:
            raise NotFound(f"no payload captured for request {request_id!r}")
        return {
            "request_id": row["request_id"],
            "ts": rfc3339(row["ts"]),
            "request": _body(row["request_body"]),
            "response": _body(row["response_body"]),
            "request_truncated": row["request_truncated"],
            "response_truncated": row["response_truncated"],
        }

    @app.get("/api/settings/payload_logging", dependencies=admin, tags=["Usage"])
    async def get_payload_logging() -> dict[str, Any]:
        async with engine.connect() as conn:
            return current_setting({SETTING_KEY: await store.get_setting(conn, SETTING_KEY)})

    @app.put("/api/settings/payload_logging", dependencies=admin, tags=["Usage"])
    async def put_payload_logging(body: Annotated[PayloadLoggingUpdate, Body()]) -> dict[str, Any]:
        """Switch payload capture on or off for every replica (a catalog change: the snapshot of each
        replica sees it within the usual reload time); optionally set the per-body cap."""
        async with writer.begin() as conn:
            current = current_setting({SETTING_KEY: await store.get_setting(conn, SETTING_KEY)})
            value = {
                "enabled": body.enabled,
                "max_bytes": body.max_bytes if body.max_bytes is not None else current["max_bytes"],
            }
            await store.put_setting(conn, SETTING_KEY, value, utcnow())
            await catalog_store.bump_revision(conn)
        await on_settings_change()
        return value


class UsageQueries:
    """The usage API's reads (SPEC §8) behind the routes and the dashboard alike: ``params`` are the
    query parameters as given; bad ones are a 400 naming them (unknown names are refused by the
    caller, which knows the route's parameter set: see :func:`relay.control.query.single_params`)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def events(self, params: Mapping[str, str]) -> dict[str, Any]:
        limit = _limit(params.get("limit"))
        cursor = params.get("cursor")
        check_cursor(cursor, store.decode_cursor)
        async with self._engine.connect() as conn:
            filters = await _filters(conn, params)
            rows, next_cursor = await store.query_events(conn, filters, limit=limit, cursor=cursor)
        return {"events": [_event(r) for r in rows], "next_cursor": next_cursor}

    async def summary(self, params: Mapping[str, str]) -> dict[str, Any]:
        group_by = params.get("group_by", "")
        if group_by not in store.GROUPS:
            choices = "|".join(store.GROUPS)
            raise InvalidRequest(f"group_by: must be one of {choices}, got {params.get('group_by')!r}")
        async with self._engine.connect() as conn:
            filters = await _filters(conn, params)
            rows = await store.summary(conn, group_by, filters)
            if group_by in REFS or group_by == "credential":
                # A credential group is named by its relay key's name; a token (jti) has no name.
                table = t.relay_keys if group_by == "credential" else REFS[group_by]
                names = await catalog_store.names(conn, table, [r["group"] for r in rows])
                for row in rows:
                    row["name"] = names.get(row["group"])  # None once the object is deleted
        return {"rows": rows}


def _params(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    return single_params(request.query_params.multi_items(), allowed)


def _limit(raw: str | None) -> int:
    return parse_limit(raw, default=DEFAULT_LIMIT, maximum=MAX_LIMIT)


async def _filters(conn: AsyncConnection, params: Mapping[str, str]) -> store.EventFilter:
    values: dict[str, Any] = {}
    source = params.get("source")
    if source is not None:
        if source not in ("live", "batch"):
            raise InvalidRequest(f"source: must be live or batch, got {source!r}")
        values["source"] = source
    for name, table in REFS.items():
        ref = params.get(name)
        if ref is not None:
            values[f"{name}_id"] = await catalog_store.resolve_ref(conn, table, ref) or ref
    for name, column in PLAIN.items():
        if name in params:
            values[column] = params[name]
    if params.get("status_class") is not None:
        values["status_class"] = parse_choice("status_class", params["status_class"], store.STATUS_CLASSES)
    status = params.get("status")
    if status is not None:
        if not (status.isascii() and status.isdigit()) or int(status) > 999:
            raise InvalidRequest(f"status: must be an HTTP status or 0, got {status!r}")
        values["status"] = int(status)
    error = params.get("error")
    if error is not None:
        if error.lower() not in ("true", "false"):
            raise InvalidRequest(f"error: must be true or false, got {error!r}")
        values["error"] = error.lower() == "true"
    if "from" in params:
        values["ts_from"] = parse_timestamp("from", params["from"])
    if "to" in params:
        values["ts_to"] = parse_timestamp("to", params["to"])
    check_range(values.get("ts_from"), values.get("ts_to"))
    return store.EventFilter(**values)


def _event(row: Row) -> Row:
    # Events written before requested_model existed (migration 0007) cannot have fallen back.
    return {**row, "ts": rfc3339(row["ts"]), "requested_model": row.get("requested_model") or row["model"]}


def _body(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", errors="replace")


_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "source": "live | batch",
    "project": "project id or name",
    "team": "team id or name",
    "policy": "policy id or name",
    "model": "model name as recorded",
    "host": "host name as recorded",
    "principal_id": "service account or user id",
    "credential_id": "relay key id or token jti",
    "batch_id": "batch id",
    "status_class": "2xx | 4xx | 5xx (of the upstream status; 0 = never reached is in none)",
    "status": "exact upstream status; 0 = upstream never reached",
    "error": "true | false: non-2xx status or an error recorded",
    "from": "RFC 3339, inclusive",
    "to": "RFC 3339, exclusive",
    "limit": f"1–{MAX_LIMIT}, default {DEFAULT_LIMIT}",
    "cursor": "next_cursor of the previous page",
    "group_by": "|".join(store.GROUPS),
}


def _documented(names: frozenset[str]) -> list[dict[str, Any]]:
    """OpenAPI entries for parameters parsed by hand (so /api/docs still lists them)."""
    return [
        {
            "name": name,
            "in": "query",
            "required": name == "group_by",
            "schema": {"type": "string"},
            "description": _DESCRIPTIONS[name],
        }
        for name in sorted(names)
    ]
