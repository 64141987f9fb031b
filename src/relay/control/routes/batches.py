"""HTTP routes of the admin batch API (SPEC §11, §17): list every owner's batches, read one, cancel one,
delete a finished one.

Thin: the query parameters go to :class:`relay.control.services.batches.BatchAdmin` as given (it
refuses unknown ones and bad values with a 400 naming them), its answer is the response. Admin bearer
only. What it deliberately does not know: batches beyond what the service answers.
"""

from typing import Any

from fastapi import FastAPI, Request, Response

from relay.control.query import single_params
from relay.control.routes.table import Route, mount
from relay.control.services.batches import DESCRIPTIONS, LIST_PARAMS, BatchAdmin


class BatchRoutes:
    def __init__(self, admin_batches: BatchAdmin) -> None:
        self._batches = admin_batches

    async def list_batches(self, request: Request) -> dict[str, Any]:
        """Batches of every owner and batch API, newest first: ``{"items", "next_cursor"}`` (null on
        the last page). Each item: id, api, owner, state, counts, attribution ids, timestamps."""
        return await self._batches.list(single_params(request.query_params.multi_items()))

    async def get_batch(self, batch_id: str) -> dict[str, Any]:
        """One batch: its state, item counts and ``failures`` (discarded items grouped by §10.4 cause:
        ``[{"cause", "count", "examples"}]``, most items first)."""
        return await self._batches.detail(batch_id)

    async def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        """Cancel any owner's batch as ``POST /v1/batches/{id}/cancel`` does (idempotent)."""
        return await self._batches.cancel(batch_id)

    async def delete_batch(self, batch_id: str) -> Response:
        """Delete a finished batch of any API now, as the retention sweep does (SPEC §17): its items,
        request and response bodies, OpenAI output and error files and idempotency rows (usage events
        stay). 204; 404 unknown; 409 ``batch_not_finished`` while an item is not final."""
        await self._batches.delete(batch_id)
        return Response(status_code=204)

    def table(self) -> list[Route]:
        documented = [
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": {"type": "string"},
                "description": doc,
            }
            for name, doc in sorted(DESCRIPTIONS.items())
            if name in LIST_PARAMS
        ]
        one = "/api/batches/{batch_id}"
        return [
            Route("GET", "/api/batches", self.list_batches, "Batch", query=documented),
            Route("GET", one, self.get_batch, "Batch"),
            Route("POST", one + "/cancel", self.cancel_batch, "Batch"),
            Route("DELETE", one, self.delete_batch, "Batch", status_code=204),
        ]


def mount_batch_routes(app: FastAPI, admin_batches: BatchAdmin, require_admin: Any) -> None:
    mount(app, BatchRoutes(admin_batches).table(), require_admin)
