"""How a batch is shown to its owner (SPEC §10.2, §10.3): the status view and the result objects.

Why apart from :mod:`relay.batches.service`. The service decides what may be read (the owner rule,
SPEC §10.8) and writes; this module only renders what was read, so every API that shows a batch
(the native API, §14's output files, §15's results, the dashboard's downloads) renders from one
place, and the results of a 50 000-item batch are read a page at a time, never held in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from relay.domain.batch_record import BatchRecord, ResultRow
from relay.domain.batches import CANCELLED, COMPLETED, DISCARDED
from relay.domain.times import rfc3339
from relay.payloads.base import PayloadStores
from relay.store.batch_queue import BatchStore, BatchView

RESULTS_PAGE = 500


def status_view(view: BatchView, *, items: bool) -> dict[str, Any]:
    """SPEC §10.2, exactly these keys; ``items=False`` leaves out ``items`` (the rest is the same)."""
    r = view.record
    answer = {
        "ID": r.id,
        "RelayKeyHash": r.owner,
        "PolicyID": r.policy_id,
        "ProjectID": r.project_id,
        "TeamID": r.team_id,
        "PrincipalKind": r.principal_kind,
        "PrincipalID": r.principal_id,
        "CredentialKind": r.credential_kind,
        "CredentialID": r.credential_id,
        "InboundShape": r.inbound_shape,
        "Status": r.status,
        "TotalItems": r.total_items,
        "CreatedAt": rfc3339(r.created_at),
        "CompletedAt": rfc3339(r.completed_at),
        "counts": view.counts,
        "items": orjson.Fragment(view.items_json),  # JSON text from the database, embedded as is
    }
    if not items:
        del answer["items"]
    if r.retry_of is not None:
        answer["RetryOf"] = r.retry_of  # a retry batch (SPEC §17): the batch it was made from
    return answer


async def result_pages(
    store: BatchStore, payloads: PayloadStores, record: BatchRecord
) -> AsyncIterator[list[tuple[ResultRow, bytes | None]]]:
    """Every item in idx order, a page at a time, each with its response body (completed items
    whose body is readable here; else None): what any API renders its results from."""
    after = -1
    while True:
        rows = await store.result_rows(record.id, after_idx=after, limit=RESULTS_PAGE)
        if not rows:
            return
        completed = {row.idx: row.response for row in rows if row.state == COMPLETED}
        payload_store = payloads.of(record.payload_store)
        bodies = await payload_store.read_responses(record.id, completed) if completed else {}
        yield [(row, bodies.get(row.idx)) for row in rows]
        if len(rows) < RESULTS_PAGE:
            return
        after = rows[-1].idx


def render_result(row: ResultRow, response: bytes | None) -> bytes:
    """One §10.3 result object; an item of a §14 or §15 batch also carries its ``custom_id`` (the
    caller's name for it), so its results read through this API can be matched to the input."""
    out: dict[str, Any] = {"idx": row.idx, "state": row.state}
    if row.source_idx is not None:  # an item of a retry batch (SPEC §17): where it came from
        out["source_idx"] = row.source_idx
    if row.custom_id is not None:  # a §14/§15 item (or its retry) keeps the caller's name for it
        out["custom_id"] = row.custom_id
    if row.state == COMPLETED and response is not None:
        try:
            out["response"] = orjson.loads(response)
        except orjson.JSONDecodeError:
            out["response"] = response.decode("utf-8", "replace")  # a non-JSON 2xx body, kept as text
    elif row.state in (DISCARDED, CANCELLED):
        out["error"] = row.error
    return orjson.dumps(out)
