"""Reading the audit log (SPEC §21): ``GET /api/audit`` (filters, keyset pages, newest first), ``GET
/api/audit/verify`` (the chain recomputed from the first entry) and the oldest-first stream that
``relay audit export`` and the verifier read.

What it deliberately does not know: how entries are written or hashed (``store.audit``,
``domain.audit``), HTTP. Every refusal is a 400 naming the parameter (``control.query``'s rules).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.control.query import check_cursor, check_range, parse_choice, parse_limit, parse_timestamp
from relay.domain.audit import ACTIONS, ChainCheck, Verdict
from relay.errors import InvalidRequest
from relay.store import audit as store

FILTERS: Final = ("actor", "kind", "action", "from", "to")
LIST_PARAMS: Final = frozenset({*FILTERS, "limit", "cursor"})
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000
CHUNK: Final = 1000  # entries per read while verifying or exporting
DESCRIPTIONS: Final = {
    "actor": "actor kind (admin_token, user, oidc), user id or email",
    "kind": "the kind changed: a catalog kind (Policy, Key, …), Token, Setting, Batch, Session, Catalog",
    "action": "|".join(ACTIONS),
    "from": "at or after (RFC 3339, inclusive)",
    "to": "at or before (RFC 3339, inclusive)",
    "limit": f"1–{MAX_LIMIT}, default {DEFAULT_LIMIT}",
    "cursor": "next_cursor of the previous page",
}


class AuditQueries:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def list(self, params: Mapping[str, str]) -> dict[str, Any]:
        """One page, newest first: ``{"items", "next_cursor"}`` (null on the last page). ``params``
        come from ``single_params(…, LIST_PARAMS)``: unknown and repeated ones are refused already."""
        where = store.AuditFilter(
            actor=_nonempty(params, "actor"),
            kind=_nonempty(params, "kind"),
            action=parse_choice("action", params["action"], ACTIONS) if "action" in params else None,
            start=parse_timestamp("from", params["from"]) if "from" in params else None,
            end=parse_timestamp("to", params["to"]) if "to" in params else None,
        )
        check_range(where.start, where.end)
        limit = parse_limit(params.get("limit"), default=DEFAULT_LIMIT, maximum=MAX_LIMIT)
        cursor = params.get("cursor") or None
        check_cursor(cursor, store.decode_cursor)
        async with self._engine.connect() as conn:
            items, next_cursor = await store.page(conn, where, limit=limit, cursor=cursor)
        return {"items": items, "next_cursor": next_cursor}

    async def oldest_first(self) -> AsyncIterator[dict[str, Any]]:
        """Every entry, oldest first, read a chunk at a time (each chunk its own short read)."""
        after = 0
        while True:
            async with self._engine.connect() as conn:
                chunk = await store.in_order(conn, after_seq=after, limit=CHUNK)
            for seq, entry in chunk:
                after = seq
                yield entry
            if len(chunk) < CHUNK:
                return

    async def verify(self) -> Verdict:
        """The chain recomputed from the first entry: ``first_bad`` is the first entry whose hash or
        link does not hold (for a removed row, the entry after it)."""
        check = ChainCheck()
        async for entry in self.oldest_first():
            check.add(entry)
        return check.verdict()


def _nonempty(params: Mapping[str, str], name: str) -> str | None:
    if name not in params:
        return None
    if not params[name]:
        raise InvalidRequest(f"{name}: must not be empty")
    return params[name]
