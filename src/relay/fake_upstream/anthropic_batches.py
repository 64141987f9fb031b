"""Anthropic's Message Batches API as the real service behaves (docs/fake-upstream.md, "Native batch
APIs"): ``POST /v1/messages/batches`` (``{"requests": [{custom_id, params}]}``), ``GET
/v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel`` and ``GET
/v1/messages/batches/{id}/results`` (JSONL, once ended).

A batch is ``in_progress`` for one ``batch_phase_ms``, then ``ended``; a cancel answers ``canceling``
and ends it; ``batch_expire_ms`` expires it first. ``request_counts`` (``processing``, ``succeeded``,
``errored``, ``canceled``, ``expired``) and each result (``succeeded`` with the message, ``errored``
with the error, ``canceled``, ``expired``) as the real API gives them; times are RFC 3339 strings and
``results_url`` is absolute, so the official SDK follows it. ``batch_refuse_status`` refuses every
create, ``batch_poll_status`` answers every retrieve and results read with that status.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from .asgi import Receive, Scope, Send, read_body, send_bytes, send_json
from .errors import error_body
from .native_batches import NativeBatch, jsonl, now
from .sse import new_id

if TYPE_CHECKING:
    from .app import FakeUpstreamApp

WINDOW_S = 86_400
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_REQUESTS = 100_000


def rfc3339(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def results(batch: NativeBatch, at: float) -> list[dict[str, Any]]:
    """Each request's ``{custom_id, result}`` once the batch ended."""
    ending = batch.ended(at)
    assert ending is not None
    rows = []
    for (custom_id, _, _), outcome in zip(batch.lines, batch.outcomes(at), strict=True):
        result: dict[str, Any]
        if outcome.status == 200:
            result = {"type": "succeeded", "message": outcome.body}
        elif outcome.status == 0:
            result = {"type": "expired" if ending[0] == "expired" else "canceled"}
        else:
            error = (outcome.body or {}).get("error", {})
            result = {"type": "errored", "error": {"type": "error", "error": error}}
        rows.append({"custom_id": custom_id, "result": result})
    return rows


def batch_object(batch: NativeBatch, at: float, base_url: str, shown: str | None = None) -> dict[str, Any]:
    """The batch at ``at``; ``shown``: the status a create (``in_progress``, nothing done yet) or a
    cancel (``canceling``) answers with, whatever the clock says — the real API answers those first."""
    ending = None if shown else batch.ended(at)
    total = len(batch.lines)
    counts = {"processing": total, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if ending is not None:
        counts["processing"] = 0
        for row in results(batch, at):
            kind = row["result"]["type"]
            counts[kind] += 1
    else:
        done = 0 if shown == "in_progress" else batch.done(at)
        counts["processing"], counts["succeeded"] = total - done, done
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": "ended"
        if ending
        else (shown or ("canceling" if batch.cancelled_at else "in_progress")),
        "request_counts": counts,
        "ended_at": rfc3339(ending[1]) if ending else None,
        "created_at": rfc3339(batch.created),
        "expires_at": rfc3339(batch.created + WINDOW_S),
        "archived_at": None,
        "cancel_initiated_at": rfc3339(batch.cancelled_at),
        "results_url": f"{base_url}/v1/messages/batches/{batch.id}/results" if ending else None,
    }


def _base_url(scope: Scope) -> str:
    host = dict(scope["headers"]).get(b"host")
    if host:
        return f"{scope.get('scheme', 'http')}://{host.decode('latin-1')}"
    server = scope.get("server") or ("127.0.0.1", 80)
    return f"http://{server[0]}:{server[1]}"


def _validate(body: Any) -> str | None:
    """Why a create body is refused, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list) or not body["requests"]:
        return "requests: Field required (a non-empty list)"
    if len(body["requests"]) > MAX_REQUESTS:
        return f"requests: at most {MAX_REQUESTS} requests per batch"
    seen: set[str] = set()
    for index, request in enumerate(body["requests"]):
        if not isinstance(request, dict) or not isinstance(request.get("params"), dict):
            return f"requests.{index}.params: Field required"
        custom_id = request.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
            return f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if custom_id in seen:
            return f"requests.{index}.custom_id: duplicate custom_id {custom_id!r}"
        seen.add(custom_id)
    return None


async def handle(app: FakeUpstreamApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Every ``/v1/messages/batches…`` request."""
    path, method = scope["path"], scope["method"]
    raw = await read_body(receive)
    headers = dict(scope["headers"])
    auth = headers.get(b"authorization", b"")
    bearer = auth[7:].decode("latin-1").strip() if auth[:7].lower() == b"bearer " else None
    key = headers.get(b"x-api-key", b"").decode("latin-1").strip() or bearer
    entry = app.recorder.record(path, method, scope["headers"], {"bytes": len(raw)}, key)
    config, at = app.config, now()

    async def answer(status: int, payload: Any) -> None:
        app.recorder.set_status(entry, status)
        if status >= 400:
            await send_bytes(send, status, error_body("anthropic", status, payload))
        else:
            await send_json(send, status, payload)

    if key is None:
        await answer(401, "x-api-key header is required")
        return
    if b"anthropic-version" not in headers:
        await answer(400, "anthropic-version: header is required")
        return
    parts = path.strip("/").split("/")  # ["v1", "messages", "batches", id?, action?]
    if method == "POST" and len(parts) == 3:
        if config.batch_refuse_status is not None:
            await answer(
                config.batch_refuse_status, "The batch was refused (fake upstream: batch_refuse_status)."
            )
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await answer(400, "There was an error parsing the body of your request.")
            return
        refused = _validate(body)
        if refused is not None:
            await answer(400, refused)
            return
        lines = [(r["custom_id"], r["params"], orjson.dumps(r["params"])) for r in body["requests"]]
        expire = config.batch_expire_ms / 1000 if config.batch_expire_ms is not None else None
        created = NativeBatch(
            new_id("msgbatch_01", 11),
            "/v1/messages",
            lines,
            at,
            config.batch_phase_ms / 1000,
            expire,
            phases=1,
        )
        app.native.batches[created.id] = created
        await answer(200, batch_object(created, at, _base_url(scope), shown="in_progress"))
        return
    batch = app.native.batches.get(parts[3]) if len(parts) > 3 else None
    if batch is None or batch.phases != 1:
        await answer(404, f"No message batch found with id '{parts[3] if len(parts) > 3 else ''}'.")
    elif method == "GET" and len(parts) == 4:
        if config.batch_poll_status is not None:
            await answer(config.batch_poll_status, "Overloaded")
        else:
            await answer(200, batch_object(batch, at, _base_url(scope)))
    elif method == "POST" and len(parts) == 5 and parts[4] == "cancel":
        if batch.ended(at) is None:
            batch.cancelled_at = at
            await answer(200, batch_object(batch, at, _base_url(scope), shown="canceling"))
        else:
            await answer(200, batch_object(batch, at, _base_url(scope)))  # idempotent once ended
    elif method == "GET" and len(parts) == 5 and parts[4] == "results":
        if config.batch_poll_status is not None:
            await answer(config.batch_poll_status, "Overloaded")
        elif batch.ended(at) is None:
            await answer(400, f"Message Batch {batch.id} has not finished processing.")
        else:
            content = jsonl(results(batch, at))
            app.recorder.set_status(entry, 200)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/binary"),
                        (b"content-length", str(len(content)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": content})
    else:
        await answer(404, f"Invalid URL ({method} {path})")
