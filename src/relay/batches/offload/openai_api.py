"""OpenAI's Files and Batch APIs, spoken for an offloaded batch (SPEC §22, ``adapter: openai``):
upload the items as a ``purpose=batch`` JSONL file, ``POST /v1/batches``, poll ``GET
/v1/batches/{id}``, forward a cancel, and read the output and error files line by line.

States: ``validating``, ``in_progress``, ``finalizing``, ``cancelling`` run; ``completed``,
``cancelled``, ``expired`` and ``failed`` end. Counts: ``request_counts.completed + failed`` lines done
of ``total``. A result line maps as a gateway-run item would end: a 2xx ``response`` is ``completed``
with its body; any other status is ``discarded`` with §10.4's ``upstream returned <status>: …``; a
line with no response (``batch_expired``, ``batch_cancelled``) was never run (``never_ran``). Lines
absent from both files once the batch ended were never run either; the poller fills those in.

Every request carries ``Authorization: Bearer <host key>``; the key never reaches an error text.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from relay.batches.item_shapes import upstream_returned
from relay.batches.offload.provider import (
    Ending,
    ProviderBatch,
    ProviderLine,
    ProviderRefused,
    ProviderUnavailable,
    answer_lines,
    never_ran,
    read_answer,
    read_line,
)
from relay.upstream import Upstream, UpstreamConnectionError, UpstreamTimeout

ENDINGS: dict[str, Ending] = {
    "completed": "completed",
    "cancelled": "cancelled",
    "expired": "expired",
    "failed": "failed",
}


class OpenAIBatchAPI:
    def __init__(self, upstream: Upstream, base_url: str, key: str) -> None:
        self._upstream = upstream
        self._base = base_url.rstrip("/")
        self._auth = {"authorization": f"Bearer {key}"}

    async def _call(self, method: str, path: str, body: bytes | None = None, **headers: str) -> bytes:
        url = self._base + path
        try:
            if method == "GET":
                response = await self._upstream.get(url, self._auth)
            else:
                sent = {**self._auth, "content-type": "application/json", **headers}
                response = await self._upstream.post(url, sent, body or b"{}")
            return await read_answer(response)
        except (UpstreamConnectionError, UpstreamTimeout) as exc:
            raise ProviderUnavailable(exc.message) from None

    async def create(self, endpoint: str, lines: Sequence[tuple[str, bytes]]) -> ProviderBatch:
        content = b"".join(
            b'{"custom_id":'
            + orjson.dumps(custom_id)
            + b',"method":"POST","url":'
            + orjson.dumps(endpoint)
            + b',"body":'
            + body
            + b"}\n"
            for custom_id, body in lines
        )
        boundary = "relay-" + os.urandom(12).hex()
        form = multipart(boundary, {"purpose": b"batch"}, ("file", "batch.jsonl", content))
        uploaded = orjson.loads(
            await self._call(
                "POST", "/v1/files", form, **{"content-type": f"multipart/form-data; boundary={boundary}"}
            )
        )
        request = {"input_file_id": uploaded["id"], "endpoint": endpoint, "completion_window": "24h"}
        return batch_of(orjson.loads(await self._call("POST", "/v1/batches", orjson.dumps(request))))

    async def poll(self, batch_id: str) -> ProviderBatch:
        return batch_of(orjson.loads(await self._call("GET", f"/v1/batches/{batch_id}")))

    async def cancel(self, batch_id: str) -> ProviderBatch:
        try:
            return batch_of(orjson.loads(await self._call("POST", f"/v1/batches/{batch_id}/cancel")))
        except ProviderRefused:
            return await self.poll(batch_id)  # it ended meanwhile: nothing left to cancel

    async def results(self, batch: ProviderBatch) -> AsyncIterator[ProviderLine]:
        assert batch.ending is not None, "results are read once the batch ended"
        polled = orjson.loads(await self._call("GET", f"/v1/batches/{batch.id}"))
        for file_id in (polled.get("output_file_id"), polled.get("error_file_id")):
            if not file_id:
                continue
            async for raw in self._lines(f"/v1/files/{file_id}/content"):
                line = read_line(raw, batch.ending, line_of)
                if line is not None:
                    yield line

    async def _lines(self, path: str) -> AsyncIterator[bytes]:
        try:
            response = await self._upstream.get(self._base + path, self._auth)
        except (UpstreamConnectionError, UpstreamTimeout) as exc:
            raise ProviderUnavailable(exc.message) from None
        async for line in answer_lines(response):
            yield line


def batch_of(raw: dict[str, Any]) -> ProviderBatch:
    status = str(raw.get("status"))
    counts = raw.get("request_counts") or {}
    errors = (raw.get("errors") or {}).get("data") or []
    failure = "; ".join(f"line {e.get('line')}: {e.get('message')}" for e in errors) or None
    return ProviderBatch(
        id=str(raw["id"]),
        state=status,
        ending=ENDINGS.get(status),
        done=int(counts.get("completed") or 0) + int(counts.get("failed") or 0),
        total=int(counts.get("total") or 0),
        failure=failure if status == "failed" else None,
    )


def line_of(raw: dict[str, Any], ending: Ending) -> ProviderLine:
    custom_id = str(raw.get("custom_id"))
    response = raw.get("response")
    if not isinstance(response, dict):
        return never_ran(custom_id, ending)
    status = int(response.get("status_code") or 0)
    body = orjson.dumps(response.get("body"))
    if 200 <= status < 300:
        return ProviderLine(custom_id, "completed", status, body, None)
    return ProviderLine(custom_id, "discarded", status, None, upstream_returned(status, body))


def multipart(boundary: str, fields: dict[str, bytes], file: tuple[str, str, bytes]) -> bytes:
    """A ``multipart/form-data`` body: plain ``fields`` then one file part."""
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n"
        for name, value in fields.items()
    ]
    name, filename, content = file
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        "Content-Type: application/jsonl\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode()
