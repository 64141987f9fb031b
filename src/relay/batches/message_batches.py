"""Anthropic Message Batches (SPEC §15) as pure functions: what a valid create is, what a MessageBatch
and a result line look like.

What it does. :func:`validate_create` turns a parsed create body into its items (``params``, each an
``anthropic``-shape engine item) and their ``custom_id``s, or raises :class:`BatchRejected` naming the
request (``requests[3].custom_id: …``); :func:`message_batch` renders the MessageBatch object from a
batch's record and its request counts; :func:`result_line` renders one line of the results JSONL.

What it deliberately does not know. HTTP, the database and the engine's queue: the façade
(``relay.batches.message_batches_api``) reads, then calls these. ``params`` are not inspected beyond
"an object that does not ask for a stream": a bad one ends ``errored`` when it runs (SPEC §15).

Invariants. Processing status is derived from the engine's own columns, never stored: ``ended`` once
the batch finished (``completed_at``), else ``canceling`` once a cancel was asked
(``cancel_requested_at``), else ``in_progress``. ``expires_at`` is ``created_at`` + 24 h; a result is
``expired`` exactly when the engine's expiry cancelled its item (error ``expired: …``).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Final

import orjson

from relay.batches.service import rfc3339
from relay.domain.batch_record import BatchRecord, ResultRow
from relay.domain.batches import CANCELLED, COMPLETED, DISCARDED, BatchRejected
from relay.store.message_batches import COUNT_KEYS, EXPIRED_PREFIX

EXPIRES_AFTER: Final = timedelta(hours=24)
CUSTOM_ID_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RESULTS_PATH: Final = "/anthropic/v1/messages/batches/{id}/results"


def validate_create(body: Any, max_items: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``(params, custom_ids)`` of a valid create body, in submit order; else :class:`BatchRejected`
    with the first problem, named by its request."""
    if not isinstance(body, dict):
        raise BatchRejected("the body must be a JSON object with requests")
    requests = body.get("requests")
    if requests is None:
        raise BatchRejected("requests: field required")
    if not isinstance(requests, list):
        raise BatchRejected("requests: must be a list of {custom_id, params}")
    if not requests:
        raise BatchRejected("requests: must not be empty")
    if len(requests) > max_items:
        raise BatchRejected(
            f"requests: {len(requests)} requests is more than the limit of {max_items}"
            " (RELAY_BATCH_MAX_ITEMS)"
        )
    params_out: list[dict[str, Any]] = []
    custom_ids: list[str] = []
    seen: dict[str, int] = {}
    for index, request in enumerate(requests):
        where = f"requests[{index}]"
        if not isinstance(request, dict):
            raise BatchRejected(f"{where}: must be an object with custom_id and params")
        custom_id = request.get("custom_id")
        if not isinstance(custom_id, str):
            raise BatchRejected(f"{where}.custom_id: field required, a string")
        if not CUSTOM_ID_RE.fullmatch(custom_id):
            raise BatchRejected(f"{where}.custom_id: must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -")
        if custom_id in seen:
            raise BatchRejected(
                f"{where}.custom_id: {custom_id!r} is already the custom_id of requests[{seen[custom_id]}]"
            )
        seen[custom_id] = index
        params = request.get("params")
        if not isinstance(params, dict):
            raise BatchRejected(f"{where}.params: field required, a Messages request object")
        if params.get("stream") is True:
            raise BatchRejected(f"{where}.params.stream: a batch request cannot stream")
        unknown = sorted(set(request) - {"custom_id", "params"})
        if unknown:
            raise BatchRejected(f"{where}.{unknown[0]}: unknown field")
        params_out.append(params)
        custom_ids.append(custom_id)
    return params_out, custom_ids


def processing_status(record: BatchRecord) -> str:
    if record.completed_at is not None:
        return "ended"
    return "canceling" if record.cancel_requested_at is not None else "in_progress"


def results_url(base_url: str, batch_id: str) -> str:
    return base_url.rstrip("/") + RESULTS_PATH.format(id=batch_id)


def message_batch(
    record: BatchRecord, counts: dict[str, int], base_url: str, *, canceling: bool = False
) -> dict[str, Any]:
    """The MessageBatch object (SPEC §15). ``canceling``: the cancel's own answer, which always reads
    ``canceling`` (the batch reads ``ended`` once no request runs)."""
    status = "canceling" if canceling else processing_status(record)
    ended = status == "ended"
    return {
        "id": record.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {key: counts.get(key, 0) for key in COUNT_KEYS},
        "created_at": rfc3339(record.created_at),
        "expires_at": rfc3339(record.created_at + EXPIRES_AFTER),
        "ended_at": rfc3339(record.completed_at) if ended else None,
        "cancel_initiated_at": rfc3339(record.cancel_requested_at),
        "archived_at": None,
        "results_url": results_url(base_url, record.id) if ended else None,
    }


def created_batch(batch_id: str, created_at: datetime, total: int) -> dict[str, Any]:
    """The MessageBatch a create answers: every request ``processing``, nothing ended."""
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": "in_progress",
        "request_counts": {key: total if key == "processing" else 0 for key in COUNT_KEYS},
        "created_at": rfc3339(created_at),
        "expires_at": rfc3339(created_at + EXPIRES_AFTER),
        "ended_at": None,
        "cancel_initiated_at": None,
        "archived_at": None,
        "results_url": None,
    }


def result_line(row: ResultRow, body: bytes | None) -> bytes:
    """One JSONL line (with its ``\\n``) of an ended batch's results: ``succeeded`` with the upstream's
    message, ``errored`` (``invalid_request_error`` when an upstream answered 4xx, ``api_error`` for
    every other cause, the item's §10.4 error text), ``canceled`` or ``expired``."""
    result: dict[str, Any]
    if row.state == COMPLETED and body is not None:
        try:
            message: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = body.decode("utf-8", "replace")  # a non-JSON 2xx body, kept as text
        result = {"type": "succeeded", "message": message}
    elif row.state == CANCELLED:
        expired = (row.error or "").startswith(EXPIRED_PREFIX)
        result = {"type": "expired" if expired else "canceled"}
    else:
        if row.state == DISCARDED:
            client_error = row.status is not None and 400 <= row.status < 500
            kind, text = ("invalid_request_error" if client_error else "api_error"), row.error or ""
        else:  # completed, but its body is not readable on this replica (SPEC §10.7, files store)
            kind, text = "api_error", "load output: the response body is not readable on this replica"
        result = {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": text}}}
    return orjson.dumps({"custom_id": row.custom_id, "result": result}) + b"\n"
