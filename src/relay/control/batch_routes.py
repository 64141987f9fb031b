"""HTTP routes of the admin batch API (SPEC §11): list every owner's batches, read one, cancel one.

Thin: the query parameters go to :class:`relay.control.batch_admin.BatchAdmin` as given (it refuses
unknown ones and bad values with a 400 naming them), its answer is the response. Admin bearer only.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request

from relay.control.batch_admin import DESCRIPTIONS, LIST_PARAMS, BatchAdmin
from relay.control.query import single_params


def mount_batch_routes(app: FastAPI, admin_batches: BatchAdmin, require_admin: Any) -> None:
    admin = [Depends(require_admin)]
    documented = [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": text}
        for name, text in sorted(DESCRIPTIONS.items())
        if name in LIST_PARAMS
    ]

    @app.get("/api/batches", dependencies=admin, tags=["Batch"], openapi_extra={"parameters": documented})
    async def list_batches(request: Request) -> dict[str, Any]:
        """Batches of every owner and batch API, newest first: ``{"items", "next_cursor"}`` (null on
        the last page). Each item: id, api, owner, state, counts, attribution ids, timestamps."""
        return await admin_batches.list(single_params(request.query_params.multi_items()))

    @app.get("/api/batches/{batch_id}", dependencies=admin, tags=["Batch"])
    async def get_batch(batch_id: str) -> dict[str, Any]:
        """One batch: its state, item counts and ``failures`` (discarded items grouped by §10.4 cause:
        ``[{"cause", "count", "examples"}]``, most items first)."""
        return await admin_batches.detail(batch_id)

    @app.post("/api/batches/{batch_id}/cancel", dependencies=admin, tags=["Batch"])
    async def cancel_batch(batch_id: str) -> dict[str, Any]:
        """Cancel any owner's batch as ``POST /v1/batches/{id}/cancel`` does (idempotent)."""
        return await admin_batches.cancel(batch_id)
