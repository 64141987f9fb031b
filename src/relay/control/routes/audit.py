"""HTTP routes of the audit log (SPEC §21): ``GET /api/audit`` and ``GET /api/audit/verify``, admin
bearer only (a user's session never reads the log).

Thin: the query parameters go to :class:`relay.control.audit.queries.AuditQueries` (an unknown or
repeated one, or a bad value, is a 400 naming it); its answer is the response.
"""

from typing import Any

from fastapi import FastAPI, Request

from relay.control.audit.queries import DESCRIPTIONS, LIST_PARAMS, AuditQueries
from relay.control.query import single_params
from relay.control.routes.table import Route, mount


class AuditRoutes:
    def __init__(self, queries: AuditQueries) -> None:
        self._queries = queries

    async def list_audit(self, request: Request) -> dict[str, Any]:
        """Audit entries, newest first: ``{"items", "next_cursor"}``. Each entry: id, at, actor,
        action, kind, ref, before?, after?, ip, user_agent, request_id, prev_hash, hash."""
        return await self._queries.list(single_params(request.query_params.multi_items(), LIST_PARAMS))

    async def verify_audit(self) -> dict[str, Any]:
        """Recompute the hash chain: ``{"ok", "entries", "first_bad"}`` (the first entry whose hash or
        link to the previous entry does not hold; for a removed row, the entry after it)."""
        return (await self._queries.verify()).as_json()

    def table(self) -> list[Route]:
        documented = [
            {"name": n, "in": "query", "required": False, "schema": {"type": "string"}, "description": d}
            for n, d in sorted(DESCRIPTIONS.items())
        ]
        return [
            Route("GET", "/api/audit", self.list_audit, "Audit", query=documented),
            Route("GET", "/api/audit/verify", self.verify_audit, "Audit"),
        ]


def mount_audit_routes(app: FastAPI, queries: AuditQueries, require_admin: Any) -> None:
    mount(app, AuditRoutes(queries).table(), require_admin)
