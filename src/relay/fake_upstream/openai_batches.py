"""OpenAI's Files and Batch APIs as the real service behaves (docs/fake-upstream.md, "Native batch
APIs"): ``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}`` and
``/v1/files/{id}/content``, ``POST /v1/batches``, ``GET /v1/batches/{id}`` and
``POST /v1/batches/{id}/cancel``.

A batch goes ``validating`` → ``in_progress`` → ``finalizing`` → ``completed`` on the clock of
``native_batches``; an input file with a bad line makes it ``failed`` (``errors.data`` naming the
line) once validation ends; ``expired``, ``cancelling`` → ``cancelled`` as the real one. When it ends,
the successes go to the output file and every other line to the error file (a 400 answer with its
body, or ``batch_expired`` / ``batch_cancelled`` for a line never run), each ``{id, custom_id,
response: {status_code, request_id, body}, error}``. ``batch_refuse_status`` refuses every create and
``batch_poll_status`` answers every retrieve and content read with that status.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from .asgi import Receive, Scope, Send, read_body, send_bytes, send_json
from .errors import error_body
from .native_batches import RENDERERS, NativeBatch, StoredFile, jsonl, now
from .sse import new_id

if TYPE_CHECKING:
    from .app import FakeUpstreamApp

COMPLETION_WINDOW = "24h"
WINDOW_S = 86_400
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")
_BOUNDARY = re.compile(rb'boundary="?([^";\s]+)"?')
_NAME = re.compile(rb'name="([^"]*)"')
_FILENAME = re.compile(rb'filename="([^"]*)"')
_LINE_ERRORS = {
    "batch_expired": "This request could not be executed before the completion window expired.",
    "batch_cancelled": "This request was not executed because the batch was cancelled.",
}


def multipart(content_type: bytes, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A ``multipart/form-data`` body's fields: name → (filename, bytes)."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        return {}
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in body.split(b"--" + found.group(1))[1:-1]:
        head, _, data = part.partition(b"\r\n\r\n")
        name = _NAME.search(head)
        if name is None:
            continue
        filename = _FILENAME.search(head)
        fields[name.group(1).decode()] = (
            filename.group(1).decode() if filename else None,
            data[:-2] if data.endswith(b"\r\n") else data,
        )
    return fields


def parse_lines(content: bytes, endpoint: str) -> tuple[list[tuple[str, Any, bytes]], list[dict[str, Any]]]:
    """The input file's requests, or the validation errors (``{code, message, param, line}``)."""
    lines: list[tuple[str, Any, bytes]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue

        def bad(code: str, message: str, number: int = number) -> None:
            errors.append({"code": code, "message": message, "param": None, "line": number})

        try:
            request = orjson.loads(raw)
        except orjson.JSONDecodeError:
            bad("invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        if not isinstance(request, dict) or not isinstance(request.get("custom_id"), str):
            bad("missing_required_parameter", "custom_id is required.")
        elif request["custom_id"] in seen:
            bad("duplicate_custom_id", "The custom_id for this request is a duplicate of another request.")
        elif request.get("method") != "POST":
            bad("invalid_method", "Only POST is supported.")
        elif request.get("url") != endpoint:
            bad("mismatched_url", f"The url for this request does not match the batch's endpoint {endpoint}.")
        elif not isinstance(request.get("body"), dict):
            bad("invalid_body", "body must be a JSON object.")
        else:
            seen.add(request["custom_id"])
            lines.append((request["custom_id"], request["body"], orjson.dumps(request["body"])))
    if not lines and not errors:
        errors.append(
            {"code": "empty_file", "message": "The input file is empty.", "param": None, "line": None}
        )
    return lines, errors


def _store_file(app: FakeUpstreamApp, filename: str, purpose: str, content: bytes) -> dict[str, Any]:
    file_id = new_id("file-", 12)
    info: dict[str, Any] = {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(now()),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }
    app.native.files[file_id] = StoredFile(info, content)
    return info


def _finish(app: FakeUpstreamApp, batch: NativeBatch, at: float) -> None:
    """Write the output and error files once, when the batch is first seen ended."""
    if "request_counts" in batch.extra:
        return
    ending = batch.ended(at)
    assert ending is not None
    outputs: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for (custom_id, _, _), outcome in zip(batch.lines, batch.outcomes(at), strict=True):
        row: dict[str, Any] = {"id": new_id("batch_req_", 12), "custom_id": custom_id}
        if outcome.status == 0:
            code = "batch_expired" if ending[0] == "expired" else "batch_cancelled"
            failures.append({**row, "response": None, "error": {"code": code, "message": _LINE_ERRORS[code]}})
            continue
        response = {"status_code": outcome.status, "request_id": new_id("req_", 12), "body": outcome.body}
        (outputs if outcome.status == 200 else failures).append({**row, "response": response, "error": None})
    name = batch.id
    if outputs:
        batch.extra["output_file_id"] = _store_file(
            app, f"{name}_output.jsonl", "batch_output", jsonl(outputs)
        )["id"]
    if failures:
        batch.extra["error_file_id"] = _store_file(
            app, f"{name}_error.jsonl", "batch_output", jsonl(failures)
        )["id"]
    batch.extra["request_counts"] = {
        "total": len(batch.lines),
        "completed": len(outputs),
        "failed": len(failures),
    }


def batch_object(
    app: FakeUpstreamApp, batch: NativeBatch, at: float, shown: str | None = None
) -> dict[str, Any]:
    """The batch object at ``at``; ``shown``: the status a create (``validating``) or a cancel
    (``cancelling``) answers with, whatever the clock says — the real API answers those first."""
    created, phase_s = batch.created, batch.phase_s
    errors = batch.extra.get("errors")
    status = batch.phase(at)
    if shown is not None:
        status = shown
    elif errors:
        status = "validating" if at < created + phase_s else "failed"
    if status in ("completed", "expired", "cancelled"):
        _finish(app, batch, at)

    def stamp(offset: float, shown: bool) -> int | None:
        return int(created + offset) if shown else None

    past_validation = at >= created + phase_s and not errors and status != "validating"
    counts = batch.extra.get("request_counts") or {
        "total": len(batch.lines),
        "completed": batch.done(at) if past_validation else 0,
        "failed": 0,
    }
    ending = batch.ended(at)
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "model": batch.extra.get("model"),
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": batch.extra["input_file_id"],
        "completion_window": COMPLETION_WINDOW,
        "status": status,
        "output_file_id": batch.extra.get("output_file_id"),
        "error_file_id": batch.extra.get("error_file_id"),
        "created_at": int(created),
        "in_progress_at": stamp(phase_s, past_validation),
        "expires_at": int(created + WINDOW_S),
        "finalizing_at": stamp(2 * phase_s, status in ("finalizing", "completed")),
        "completed_at": stamp(3 * phase_s, status == "completed"),
        "failed_at": stamp(phase_s, status == "failed"),
        "expired_at": int(ending[1]) if ending and status == "expired" else None,
        "cancelling_at": int(batch.cancelled_at) if batch.cancelled_at is not None else None,
        "cancelled_at": int(batch.cancelled_at)
        if batch.cancelled_at is not None and status == "cancelled"
        else None,
        "request_counts": counts,
        "metadata": batch.extra.get("metadata"),
    }


async def handle(app: FakeUpstreamApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Every ``/v1/files…`` and ``/v1/batches…`` request."""
    path, method = scope["path"], scope["method"]
    raw = await read_body(receive)
    headers = dict(scope["headers"])
    auth = headers.get(b"authorization", b"")
    key = auth[7:].decode("latin-1").strip() if auth[:7].lower() == b"bearer " else None
    entry = app.recorder.record(path, method, scope["headers"], {"bytes": len(raw)}, key)
    config = app.config

    async def answer(status: int, payload: Any) -> None:
        app.recorder.set_status(entry, status)
        if status >= 400 and isinstance(payload, str):
            await send_bytes(send, status, error_body("openai", status, payload))
        else:
            await send_json(send, status, payload)

    if key is None:
        await answer(401, "You didn't provide an API key (Authorization: Bearer YOUR_KEY).")
        return
    parts = path.strip("/").split("/")  # ["v1", "files" | "batches", id?, action?]
    at = now()
    if parts[1] == "files":
        if method == "POST" and len(parts) == 2:
            fields = multipart(headers.get(b"content-type", b""), raw)
            purpose = fields.get("purpose", (None, b""))[1].decode()
            if "file" not in fields or fields["file"][0] is None:
                await answer(400, "file: a file upload is required.")
            elif purpose not in ("batch", "fine-tune", "assistants", "user_data", "evals"):
                await answer(400, f"purpose: '{purpose}' is not one of the supported values.")
            else:
                await answer(200, _store_file(app, fields["file"][0] or "upload", purpose, fields["file"][1]))
            return
        stored = app.native.files.get(parts[2]) if len(parts) > 2 else None
        if method != "GET" or stored is None:
            await answer(404, f"No such File object: {parts[2] if len(parts) > 2 else ''}")
        elif config.batch_poll_status is not None:
            await answer(config.batch_poll_status, "The server is temporarily unavailable.")
        elif len(parts) == 3:
            await answer(200, stored.info)
        else:
            app.recorder.set_status(entry, 200)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/octet-stream"),
                        (b"content-length", str(len(stored.content)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": stored.content})
        return

    if method == "POST" and len(parts) == 2:
        await _create(app, raw, at, answer)
        return
    batch = app.native.batches.get(parts[2]) if len(parts) > 2 else None
    if batch is None or "input_file_id" not in batch.extra:
        await answer(404, f"No batch found with id '{parts[2] if len(parts) > 2 else ''}'.")
    elif method == "GET" and len(parts) == 3:
        if config.batch_poll_status is not None:
            await answer(config.batch_poll_status, "The server is temporarily unavailable.")
        else:
            await answer(200, batch_object(app, batch, at))
    elif method == "POST" and len(parts) == 4 and parts[3] == "cancel":
        status = batch_object(app, batch, at)["status"]
        if status not in ("validating", "in_progress", "finalizing"):
            await answer(400, f"Cannot cancel a batch with status '{status}'.")
        else:
            batch.cancelled_at = at
            await answer(200, batch_object(app, batch, at, shown="cancelling"))
    else:
        await answer(404, f"Invalid URL ({method} {path})")


async def _create(app: FakeUpstreamApp, raw: bytes, at: float, answer: Any) -> None:
    config = app.config
    if config.batch_refuse_status is not None:
        await answer(
            config.batch_refuse_status, "The batch was refused (fake upstream: batch_refuse_status)."
        )
        return
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        await answer(400, "We could not parse the JSON body of your request.")
        return
    if not isinstance(body, dict):
        await answer(400, "We could not parse the JSON body of your request.")
    elif body.get("endpoint") not in ENDPOINTS:
        await answer(400, f"endpoint: must be one of {', '.join(ENDPOINTS)}.")
    elif body.get("completion_window") != COMPLETION_WINDOW:
        await answer(400, "completion_window: only '24h' is supported.")
    elif not isinstance(body.get("input_file_id"), str) or body["input_file_id"] not in app.native.files:
        await answer(404, f"No such File object: {body.get('input_file_id')}")
    else:
        endpoint = body["endpoint"]
        assert endpoint in RENDERERS
        lines, errors = parse_lines(app.native.files[body["input_file_id"]].content, endpoint)
        expire = config.batch_expire_ms / 1000 if config.batch_expire_ms is not None else None
        batch = NativeBatch(
            new_id("batch_", 12), endpoint, [] if errors else lines, at, config.batch_phase_ms / 1000, expire
        )
        models = {line[1].get("model") for line in lines}
        batch.extra.update(
            input_file_id=body["input_file_id"],
            metadata=body.get("metadata"),
            errors=errors or None,
            model=models.pop() if len(models) == 1 else None,
        )
        app.native.batches[batch.id] = batch
        await answer(200, batch_object(app, batch, at, shown="validating"))
