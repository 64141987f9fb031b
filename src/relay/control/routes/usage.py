"""HTTP routes for usage events, their summary, captured payloads and the payload-logging setting
(SPEC §8, §9, §11).

Thin: parse the query parameters, call :class:`UsageQueries` / :class:`CapturedPayloads`, render.
Query parameters are parsed by hand rather than declared one by one so that an unknown one is refused
(400 naming it) instead of silently ignored: a typo like ``?projcet=x`` must not answer with every
project's events. They are still listed in the OpenAPI document (``openapi_extra``).

What it deliberately does not know: what the filters mean or how events are read (the services).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Final

from fastapi import Body, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from relay.control.query import single_params
from relay.control.routes.table import Route, mount
from relay.control.services.usage import (
    DEFAULT_LIMIT,
    EVENT_PARAMS,
    GROUPS,
    MAX_LIMIT,
    SUMMARY_PARAMS,
    CapturedPayloads,
    UsageQueries,
)
from relay.usage.capture import MAX_MAX_BYTES, MIN_MAX_BYTES


class PayloadLoggingUpdate(BaseModel):
    """``PUT /api/settings/payload_logging``: ``max_bytes`` left out keeps the current cap."""

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool
    max_bytes: int | None = Field(None, ge=MIN_MAX_BYTES, le=MAX_MAX_BYTES)


class UsageRoutes:
    def __init__(self, queries: UsageQueries, payloads: CapturedPayloads) -> None:
        self._queries = queries
        self._payloads = payloads

    async def list_events(self, request: Request) -> dict[str, Any]:
        """Usage events, newest first, one page at a time (``next_cursor`` is null on the last page)."""
        return await self._queries.events(_params(request, EVENT_PARAMS))

    async def usage_summary(self, request: Request) -> dict[str, Any]:
        """Requests, errors, tokens, cost and p50/p95 latency per group, over the filtered events."""
        return await self._queries.summary(_params(request, SUMMARY_PARAMS))

    async def get_payload(self, request_id: str) -> dict[str, Any]:
        """A live request's captured bodies: JSON when they parse, else text (SSE streams, truncated
        bodies)."""
        return await self._payloads.payload(request_id)

    async def get_payload_logging(self) -> dict[str, Any]:
        return await self._payloads.setting()

    async def put_payload_logging(self, body: Annotated[PayloadLoggingUpdate, Body()]) -> dict[str, Any]:
        """Switch payload capture on or off for every replica (a catalog change: the snapshot of each
        replica sees it within the usual reload time); optionally set the per-body cap."""
        return await self._payloads.set_logging(body.enabled, body.max_bytes)

    def table(self) -> list[Route]:
        setting = "/api/settings/payload_logging"
        return [
            Route("GET", "/api/usage/events", self.list_events, "Usage", query=EVENT_QUERY),
            Route(
                "GET", "/api/usage/summary", self.usage_summary, "Usage", query=_documented(SUMMARY_PARAMS)
            ),
            Route("GET", "/api/payloads/{request_id}", self.get_payload, "Usage"),
            Route("GET", setting, self.get_payload_logging, "Usage"),
            Route("PUT", setting, self.put_payload_logging, "Usage"),
        ]


def mount_usage_routes(
    app: FastAPI,
    queries: UsageQueries,
    payloads: CapturedPayloads,
    require_admin: Callable[..., Awaitable[None]],
) -> None:
    mount(app, UsageRoutes(queries, payloads).table(), require_admin)


def _params(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    return single_params(request.query_params.multi_items(), allowed)


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
    "percentiles": "true | false (default true): false leaves p50/p95 null and reads the usage rollup",
    "group_by": "|".join(GROUPS) + " (UTC; minute needs from within 1 day of to, hour within 31 days)",
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


EVENT_QUERY: Final = _documented(EVENT_PARAMS)
SUMMARY_QUERY: Final = _documented(SUMMARY_PARAMS)
