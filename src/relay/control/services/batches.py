"""The admin batch API's service (SPEC §11, last bullet): every owner's batches, of every batch API.

What it does. :meth:`BatchAdmin.list` validates the filters (each bad one is a 400 naming it) and
answers one keyset page ``{"items", "next_cursor"}``; :meth:`detail` adds a batch's item counts and
its failures grouped by §10.4 cause; :meth:`cancel` cancels any owner's batch exactly as §10.5 does;
:meth:`delete` deletes a finished one now, as the retention sweep would (SPEC §17: the one
``BatchDeleter``; 404 unknown, 409 ``batch_not_finished``), and logs what went.
The HTTP routes (``relay.control.routes.batches``) and the dashboard both call it, so the dashboard
shows and refuses exactly what the API does.

``scope`` narrows every call to some projects: the dashboard passes a signed-in user's projects, and
a batch outside them is "not found", as for an unknown id. ``None`` (the admin) is every project.

What it deliberately does not know. SQL (``relay.store.batches``), how a cancel reaches the queue and
this replica's workers (``relay.batches.service``), HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.deleter import BatchDeleter
from relay.batches.service import BatchNotFound, BatchService
from relay.control.audit.log import AuditLog
from relay.control.query import check_cursor, check_range, parse_choice, parse_limit, parse_timestamp
from relay.domain.batches import ITEM_STATES
from relay.domain.failures import group_failures
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest
from relay.store import batch_item_pages
from relay.store import batches as store
from relay.store import catalog as catalog_store
from relay.store import tables as t
from relay.store.batch_queue import InTransaction

log = logging.getLogger("relay.retention")
ITEM_PAGE: Final = 100
MAX_ITEM_PAGE: Final = 500
FILTERS: Final = ("project", "team", "owner", "state", "api", "from", "to")
APIS: Final = store.APIS
LIST_PARAMS: Final = frozenset({*FILTERS, "limit", "cursor"})
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000
DESCRIPTIONS: Final[Mapping[str, str]] = {
    "project": "project id or name",
    "team": "team id or name",
    "owner": "user:<user id> (every token of that user) or key:<relay key id>",
    "state": "|".join(store.STATES),
    "api": "|".join(store.APIS) + " (the batch API a batch was created through)",
    "from": "created at or after (RFC 3339)",
    "to": "created before (RFC 3339)",
    "limit": f"1–{MAX_LIMIT}, default {DEFAULT_LIMIT}",
    "cursor": "next_cursor of the previous page",
}


class BatchAdmin:
    def __init__(
        self, engine: AsyncEngine, batches: BatchService, deleter: BatchDeleter, audit: AuditLog | None = None
    ) -> None:
        self._engine = engine
        self._batches = batches
        self._deleter = deleter
        self._audit = audit or AuditLog(engine)

    def _appending(self, action: str, batch_id: str) -> InTransaction:
        """What appends the audit entry of ``action`` inside the engine's transaction that does it
        (the engine calls it only when the batch changed: a repeated cancel appends nothing)."""
        entry = self._audit.entry(action, "Batch", batch_id)

        async def append(conn: AsyncConnection) -> None:
            await self._audit.append(conn, [entry])

        return append

    async def list(self, params: Mapping[str, str], scope: tuple[str, ...] | None = None) -> dict[str, Any]:
        """One page of batches, newest first; ``params`` are the query parameters (unknown → 400)."""
        for name in params:
            if name not in LIST_PARAMS:
                known = ", ".join(sorted(LIST_PARAMS))
                raise InvalidRequest(f"unknown query parameter {name!r}; known: {known}")
        limit = _limit(params.get("limit"))
        cursor = params.get("cursor") or None
        check_cursor(cursor, store.decode_cursor)
        async with self._engine.connect() as conn:
            filters = await self._filters(conn, params, scope)
            rows, next_cursor = await store.list_batches(conn, filters, limit=limit, cursor=cursor)
            counts = await store.item_counts(conn, [r["id"] for r in rows])
        return {"items": [_render(row, counts[row["id"]]) for row in rows], "next_cursor": next_cursor}

    async def detail(self, batch_id: str, scope: tuple[str, ...] | None = None) -> dict[str, Any]:
        """A batch with its counts and its discarded items grouped by cause (404 when unknown)."""
        async with self._engine.connect() as conn:
            row = await store.get_batch(conn, batch_id)
            if row is None or (scope is not None and row["project_id"] not in scope):
                raise BatchNotFound()
            counts = (await store.item_counts(conn, [batch_id]))[batch_id]
            errors = await store.failure_errors(conn, batch_id)
        return {**_render(row, counts), "failures": group_failures(errors)}

    async def items(
        self, batch_id: str, params: Mapping[str, str], scope: tuple[str, ...] | None = None
    ) -> dict[str, Any]:
        """One page of a batch's items (``state``, ``error`` substring, ``after`` idx, ``limit`` up to
        500), 404 outside ``scope``: ``{"items": [{idx, state, status, error, custom_id}], "next_after"}``."""
        state = params.get("state") or None
        if state is not None:
            state = parse_choice("state", state, ITEM_STATES)
        after = params.get("after") or "-1"
        if after != "-1" and not (after.isascii() and after.isdigit()):
            raise InvalidRequest(f"after: must be an item index (0 or more), got {after!r}")
        limit = parse_limit(params.get("limit"), default=ITEM_PAGE, maximum=MAX_ITEM_PAGE)
        error = (params.get("error") or "").strip() or None
        if error is not None and len(error) > 200:
            raise InvalidRequest("error: at most 200 characters")
        filters = batch_item_pages.ItemFilter(state=state, error=error, after_idx=int(after))
        async with self._engine.connect() as conn:
            row = await store.get_batch(conn, batch_id)
            if row is None or (scope is not None and row["project_id"] not in scope):
                raise BatchNotFound()
            rows, next_after = await batch_item_pages.item_page(conn, batch_id, filters, limit=limit)
        return {"items": rows, "next_after": next_after}

    async def owner_names(self, owners: Sequence[str]) -> dict[str, str]:
        """``{owner: name}`` for owners as :func:`store.owner_of` writes them (``user:<id>`` → the
        user's name, ``key:<id>`` → the relay key's name); an owner deleted since is left out."""
        users = [o.partition(":")[2] for o in owners if o.startswith("user:")]
        keys = [o.partition(":")[2] for o in owners if o.startswith("key:")]
        async with self._engine.connect() as conn:
            user_names = await catalog_store.names(conn, t.users, users) if users else {}
            key_names = await catalog_store.names(conn, t.relay_keys, keys) if keys else {}
        out = {f"user:{i}": name for i, name in user_names.items()}
        out.update({f"key:{i}": name for i, name in key_names.items()})
        return out

    async def results_source(self, batch_id: str, scope: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Where a batch's results are, as its own API serves them (404 outside ``scope``): the §14
        output and error files once an OpenAI batch is finalized (with the raw ``owner`` the files
        belong to: for the caller to read them, never to render), and whether the batch has ended (a
        §15 batch's results exist only then; a §14 batch's files once it is finalized)."""
        async with self._engine.connect() as conn:
            row = await store.get_batch(conn, batch_id)
        if row is None or (scope is not None and row["project_id"] not in scope):
            raise BatchNotFound()
        data = row["api_data"] or {}
        ended = row["completed_at"] is not None
        if row["api"] == "openai":  # its files exist once finalized (or never, for a failed one)
            ended = data.get("ended_at") is not None or row["api_status"] == "failed"
        return {
            "api": row["api"],
            "owner": row["owner"],
            "ended": ended,
            "output_file_id": data.get("output_file_id"),
            "error_file_id": data.get("error_file_id"),
        }

    async def cancel(self, batch_id: str, scope: tuple[str, ...] | None = None) -> dict[str, Any]:
        """SPEC §10.5 for any owner: idempotent, ``{"status": "cancelled"}``; the cancel that changes
        the batch appends its audit entry in its own transaction (SPEC §21)."""
        if scope is not None:
            await self.detail(batch_id, scope)  # 404 outside the scope, before any change
        return await self._batches.cancel_any(batch_id, also=self._appending("cancel", batch_id))

    async def delete(self, batch_id: str) -> None:
        """SPEC §17: any API's finished batch, with its items, bodies, §14 output files and
        idempotency rows (usage events stay); 404 unknown, 409 ``batch_not_finished``."""
        deleted = await self._deleter.delete(batch_id, also=self._appending("delete", batch_id))
        log.info("deleted batch %s at the admin's request: %s", batch_id, deleted.describe())

    async def _filters(
        self, conn: Any, params: Mapping[str, str], scope: tuple[str, ...] | None
    ) -> store.BatchFilter:
        values: dict[str, Any] = {}
        project = params.get("project")
        if project is not None:
            # Batches keep the ids of deleted projects (SPEC §2): an unknown name is taken as an id.
            project_id = await catalog_store.resolve_ref(conn, t.projects, project) or project
            values["project_ids"] = (project_id,) if scope is None or project_id in scope else ()
        elif scope is not None:
            values["project_ids"] = scope
        team = params.get("team")
        if team is not None:
            values["team_id"] = await catalog_store.resolve_ref(conn, t.teams, team) or team
        owner = params.get("owner")
        if owner is not None:
            kind, _, ident = owner.partition(":")
            if kind not in ("user", "key") or not ident:
                raise InvalidRequest(f"owner: must be user:<user id> or key:<relay key id>, got {owner!r}")
            values["owner"] = owner
        if params.get("state") is not None:
            values["state"] = parse_choice("state", params["state"], store.STATES)
        if params.get("api") is not None:
            values["api"] = parse_choice("api", params["api"], store.APIS)
        if params.get("from"):
            values["created_from"] = parse_timestamp("from", params["from"])
        if params.get("to"):
            values["created_to"] = parse_timestamp("to", params["to"])
        check_range(values.get("created_from"), values.get("created_to"))
        return store.BatchFilter(**values)


def _render(row: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
    out = store.page_row(dict(row))
    done = sum(n for state, n in counts.items() if state in ("completed", "discarded", "cancelled"))
    return {
        "id": out["id"],
        "api": out["api"],
        "owner": store.owner_of(dict(row)),
        "state": store.state_of(dict(row)),
        "status": out["status"],
        "inbound_shape": out["inbound_shape"],
        "project_id": out["project_id"],
        "team_id": out["team_id"],
        "policy_id": out["policy_id"],
        "policy_name": out["policy_name"],
        "principal_kind": out["principal_kind"],
        "principal_id": out["principal_id"],
        "credential_kind": out["credential_kind"],
        "credential_id": out["credential_id"],
        "total_items": out["total_items"],
        "finished_items": done,
        "counts": {state: counts[state] for state in ITEM_STATES if state in counts},
        "created_at": rfc3339(out["created_at"]),
        "completed_at": rfc3339(out["completed_at"]),
        "offloaded": out.get("offload_batch_id") is not None or out.get("offload_state") is not None,
        "offload": offload_view(out),
    }


def offload_view(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """SPEC §22: the binding a batch was offloaded to, the provider's batch id and state as last
    polled, and why it runs on Relay after all when the provider refused it; None for a batch that
    was never offloaded."""
    if row.get("offload_binding_id") is None and row.get("offload_reason") is None:
        return None
    return {
        "binding_id": row.get("offload_binding_id"),
        "provider_batch_id": row.get("offload_batch_id"),
        "provider_state": row.get("offload_state"),
        "reason": row.get("offload_reason"),
    }


def _limit(raw: str | None) -> int:
    return parse_limit(raw, default=DEFAULT_LIMIT, maximum=MAX_LIMIT)
