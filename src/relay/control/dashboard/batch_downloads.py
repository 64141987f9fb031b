"""A batch's results, downloaded from its page in the shape its own API serves them (SPEC §16 with
§10.3, §14, §15), so what an operator downloads is what the batch's owner gets:

- a relay batch (§10): the §10.3 result objects as JSONL, any time (unfinished items say their state);
- an OpenAI batch (§14): its output file or its error file (``?file=output|error``), once finalized;
- a Message Batch (§15): the ``.jsonl`` results (``succeeded``/``errored``/``canceled``/``expired``),
  once it has ended.

The batch is looked up within the viewer's projects first (404 outside them, as the API answers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from relay.control.dashboard.web import HEADERS, Dashboard, PageRoutes, Refused
from relay.domain.message_batches import result_line

OPENAI_FILES = ("output", "error")


async def results(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    batch_id = request.path_params["batch_id"]
    source = await dash.batches.results_source(batch_id, viewer.scope)
    if source["api"] == "openai":
        return await _openai_file(dash, batch_id, source, request.query_params.get("file", "output"))
    if source["api"] == "anthropic" and not source["ended"]:
        raise Refused(409, "a Message Batch has results once it has ended")
    record = await dash.batch_service.record(batch_id)

    async def lines() -> AsyncIterator[bytes]:
        if source["api"] == "anthropic":
            async for rows in dash.batch_service.result_pages(record):
                yield b"".join(result_line(row, body) for row, body in rows)
        else:
            async for page in dash.batch_service.results(record):
                yield b"".join(line + b"\n" for line in page)

    return _download(lines(), f"{batch_id}-results.jsonl")


ROUTES: Final[PageRoutes] = [("/ui/batches/{batch_id}/results", results, ("GET",))]


async def _openai_file(dash: Dashboard, batch_id: str, source: dict[str, Any], which: str) -> Response:
    if which not in OPENAI_FILES:
        raise Refused(400, f"file: must be output or error, got {which!r}")
    file_id = source[f"{which}_file_id"]
    if file_id is None or dash.files is None:
        raise Refused(404, f"this batch has no {which} file (yet: it is written when the batch is finalized)")
    _, chunks = await dash.files.content(source["owner"], file_id)
    try:  # the files store finds a missing file at its first read: answer 503 before any 200 is sent
        first = await anext(chunks, b"")
    except FileNotFoundError:
        message = "the file's bytes are not on this replica (RELAY_BATCH_PAYLOAD_DIR is not shared)"
        raise Refused(503, message) from None

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    return _download(body(), f"{batch_id}_{which}.jsonl")


def _download(body: AsyncIterator[bytes], filename: str) -> StreamingResponse:
    headers = {**HEADERS, "content-disposition": f'attachment; filename="{filename}"'}
    return StreamingResponse(body, media_type="application/x-ndjson", headers=headers)
