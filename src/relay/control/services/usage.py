"""The usage API's reads (SPEC §8, §9): events page by page, their summary per group, a live request's
captured bodies, and the payload-logging setting — behind the ``/api`` routes and the dashboard alike,
so both show (and refuse) exactly the same.

``params`` are the query parameters as given (already single: the caller refuses unknown and repeated
names, since it knows the route's parameter set: see :func:`relay.control.query.single_params`); a bad
value is a 400 naming it.

``project``, ``team`` and ``policy`` accept an id or a name. A name is resolved against the current
catalog; a value that matches no current object is used as an id as given, because events keep the
ids of objects deleted since (SPEC §2). ``model`` and ``host`` match the names recorded on the events.

What it deliberately does not know: HTTP (the routes parse and render), or how events are written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Final

import orjson
from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.log import AuditLog
from relay.control.query import check_cursor, check_range, parse_choice, parse_limit, parse_timestamp
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest, NotFound
from relay.store import catalog as catalog_store
from relay.store import tables as t
from relay.store import usage as store
from relay.store import usage_breakdown, usage_pagination, usage_summaries
from relay.store.catalog import Row, utcnow
from relay.usage.capture import SETTING_KEY, current_setting

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
SUMMARY_PARAMS: Final = frozenset({*FILTERS, "group_by", "percentiles"})
GROUPS: Final = store.GROUPS
BUCKET_SPANS: Final = {"minute": timedelta(days=1), "hour": timedelta(days=31)}
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000


class UsageQueries:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def events(self, params: Mapping[str, str]) -> dict[str, Any]:
        limit = _limit(params.get("limit"))
        cursor = params.get("cursor")
        check_cursor(cursor, usage_pagination.decode_cursor)
        async with self._engine.connect() as conn:
            filters = await _filters(conn, params)
            rows, next_cursor = await usage_pagination.query_events(conn, filters, limit=limit, cursor=cursor)
        return {"events": [_event(r) for r in rows], "next_cursor": next_cursor}

    async def summary(self, params: Mapping[str, str], *, latency: bool = True) -> dict[str, Any]:
        """``latency=False`` (or ``percentiles=false``) leaves p50/p95 null (the dashboard's overview
        shows none), which lets the usage rollup answer (``relay.store.usage_summaries``)."""
        group_by = params.get("group_by", "")
        if group_by not in store.GROUPS:
            choices = "|".join(store.GROUPS)
            raise InvalidRequest(f"group_by: must be one of {choices}, got {params.get('group_by')!r}")
        percentiles = params.get("percentiles", "true")
        if percentiles.lower() not in ("true", "false"):
            raise InvalidRequest(f"percentiles: must be true or false, got {percentiles!r}")
        latency = latency and percentiles.lower() == "true"
        async with self._engine.connect() as conn:
            filters = await _filters(conn, params)
            _check_bucket_span(group_by, filters)
            rows = await usage_summaries.summary(conn, group_by, filters, latency=latency)
            if not latency:
                for row in rows:
                    row.update(p50_latency_ms=None, p95_latency_ms=None)
            if group_by in REFS or group_by == "credential":
                # A credential group is named by its relay key's name; a token (jti) has no name.
                table = t.relay_keys if group_by == "credential" else REFS[group_by]
                names = await catalog_store.names(conn, table, [r["group"] for r in rows])
                for row in rows:
                    row["name"] = names.get(row["group"])  # None once the object is deleted
        return {"rows": rows}

    async def breakdown(self, params: Mapping[str, str]) -> dict[str, list[Row]]:
        """The dashboard overview's figures per UTC day, per model and per project over the same
        filters, read in one query (from the rollup: ``relay.store.usage_summaries``), each equal to
        the summary's rows for that grouping (project rows carry ``name`` as the summary's do); no
        percentiles."""
        async with self._engine.connect() as conn:
            filters = await _filters(conn, params)
            rows = await usage_summaries.by_day_model_project(conn, filters)
            projects = usage_breakdown.roll_up(rows, "project_id")
            names = await catalog_store.names(conn, t.projects, [r["group"] for r in projects])
        for row in projects:
            row["name"] = names.get(row["group"])
        return {
            "day": usage_breakdown.roll_up(rows, "day"),
            "model": usage_breakdown.roll_up(rows, "model"),
            "project": projects,
        }


def _check_bucket_span(group_by: str, filters: store.EventFilter) -> None:
    """A per-minute or per-hour summary needs a bounded range (``from``, and ``to`` or now): at most
    :data:`BUCKET_SPANS` of it, so one request answers at most a few thousand rows, not millions."""
    span = BUCKET_SPANS.get(group_by)
    if span is None:
        return
    if filters.ts_from is None:
        raise InvalidRequest(
            f"from: group_by={group_by} needs from (at most {span.days or 1} day(s) before to)"
        )
    end = filters.ts_to or utcnow()
    if end - filters.ts_from > span:
        raise InvalidRequest(
            f"from: group_by={group_by} covers at most {span.days or 1} day(s); narrow from/to"
        )


class CapturedPayloads:
    """A live request's captured bodies, and the payload-logging setting that decides whether they are
    captured. ``on_settings_change`` runs after a settings write commits (it reloads this replica's
    snapshot; other replicas follow the revision the write bumped)."""

    def __init__(
        self,
        engine: AsyncEngine,
        on_settings_change: Callable[[], Awaitable[object]],
        audit: AuditLog | None = None,
    ) -> None:
        self._engine = engine
        self._audit = audit or AuditLog(engine)
        # The settings write reads before it writes: on SQLite its transaction must take the write lock
        # up front, or a usage-writer commit in between makes the lock upgrade fail at once ("database is
        # locked", which busy_timeout does not cover). Ignored on Postgres.
        self._writer = engine.execution_options(sqlite_begin="IMMEDIATE")
        self._on_settings_change = on_settings_change

    async def payload(self, request_id: str) -> dict[str, Any]:
        async with self._engine.connect() as conn:
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

    async def setting(self) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            return current_setting({SETTING_KEY: await store.get_setting(conn, SETTING_KEY)})

    async def set_logging(self, enabled: bool, max_bytes: int | None) -> dict[str, Any]:
        """``max_bytes`` None keeps the current cap. A catalog change: the revision moves."""
        async with self._writer.begin() as conn:
            current = current_setting({SETTING_KEY: await store.get_setting(conn, SETTING_KEY)})
            value = {
                "enabled": enabled,
                "max_bytes": max_bytes if max_bytes is not None else current["max_bytes"],
            }
            await store.put_setting(conn, SETTING_KEY, value, utcnow())
            await catalog_store.bump_revision(conn)
            await self._audit.record(conn, "update", "Setting", SETTING_KEY, before=current, after=value)
        await self._on_settings_change()
        return value


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
