"""The Anthropic Message Batches façade's pure rules (SPEC §15): one line of a batch's results.

What it does. :func:`result_line` renders one item as the ``.jsonl`` results line Anthropic's API
serves — ``succeeded`` with the upstream's message, ``errored`` (``invalid_request_error`` when an
upstream answered 4xx, ``api_error`` for every other cause, with the item's §10.4 error text),
``canceled`` or ``expired`` — for the §15 results route, the dashboard's download and
``relay batch results --format anthropic`` alike.

What it deliberately does not know. The database, payload stores and HTTP: the caller hands it the
item's row and its response body.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.domain.batch_record import ResultRow
from relay.domain.batches import CANCELLED, COMPLETED, DISCARDED, EXPIRED_PREFIX


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
