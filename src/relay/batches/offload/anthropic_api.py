"""Anthropic's Message Batches API, spoken for an offloaded batch (SPEC §22, ``adapter:
anthropic``): ``POST /v1/messages/batches`` with every item as ``{custom_id, params}``, poll ``GET
/v1/messages/batches/{id}``, forward a cancel, and read ``results_url`` (JSONL) once ``ended``.

States: ``in_progress`` and ``canceling`` run; ``ended`` ends — ``cancelled`` when a cancel was
initiated, ``expired`` when every unfinished request expired, else ``completed``. A result maps as a
gateway-run item would end: ``succeeded`` is ``completed`` with the message as its body (status 200);
``errored`` is ``discarded`` with §10.4's ``upstream returned <status>: <message>`` (400 for an
``invalid_request_error``, 500 otherwise — the API gives no status per request); ``canceled`` and
``expired`` were never run (``never_ran``).

Every request carries ``x-api-key: <host key>`` and ``anthropic-version``; the key never reaches an
error text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from relay.adapters.anthropic import DEFAULT_VERSION
from relay.batches.item_shapes import upstream_returned
from relay.batches.offload.provider import (
    Ending,
    ProviderBatch,
    ProviderLine,
    ProviderUnavailable,
    answer_lines,
    never_ran,
    read_answer,
    read_line,
)
from relay.upstream import Upstream, UpstreamConnectionError, UpstreamTimeout

PATH = "/v1/messages/batches"


class AnthropicBatchAPI:
    def __init__(self, upstream: Upstream, base_url: str, key: str) -> None:
        self._upstream = upstream
        self._base = base_url.rstrip("/")
        self._headers = {"x-api-key": key, "anthropic-version": DEFAULT_VERSION}

    async def _call(self, method: str, url: str, body: bytes | None = None) -> bytes:
        try:
            if method == "GET":
                response = await self._upstream.get(url, self._headers)
            else:
                headers = {**self._headers, "content-type": "application/json"}
                response = await self._upstream.post(url, headers, body or b"{}")
            return await read_answer(response)
        except (UpstreamConnectionError, UpstreamTimeout) as exc:
            raise ProviderUnavailable(exc.message) from None

    async def create(self, endpoint: str, lines: Sequence[tuple[str, bytes]]) -> ProviderBatch:
        # One join of small parts: the 50 000 bodies are copied once, into the request itself.
        parts = [b'{"requests":[']
        for n, (custom_id, body) in enumerate(lines):
            parts += (
                b"," if n else b"",
                b'{"custom_id":',
                orjson.dumps(custom_id),
                b',"params":',
                body,
                b"}",
            )
        parts.append(b"]}")
        raw = await self._call("POST", self._base + PATH, b"".join(parts))
        return batch_of(orjson.loads(raw))

    async def poll(self, batch_id: str) -> ProviderBatch:
        return batch_of(orjson.loads(await self._call("GET", f"{self._base}{PATH}/{batch_id}")))

    async def cancel(self, batch_id: str) -> ProviderBatch:
        return batch_of(orjson.loads(await self._call("POST", f"{self._base}{PATH}/{batch_id}/cancel")))

    async def results(self, batch: ProviderBatch) -> AsyncIterator[ProviderLine]:
        assert batch.ending is not None, "results are read once the batch ended"
        try:
            response = await self._upstream.get(f"{self._base}{PATH}/{batch.id}/results", self._headers)
        except (UpstreamConnectionError, UpstreamTimeout) as exc:
            raise ProviderUnavailable(exc.message) from None
        async for raw in answer_lines(response):
            line = read_line(raw, batch.ending, line_of)
            if line is not None:
                yield line


def batch_of(raw: dict[str, Any]) -> ProviderBatch:
    counts = {k: int(v or 0) for k, v in (raw.get("request_counts") or {}).items()}
    total = sum(counts.values())
    status = str(raw.get("processing_status"))
    ending: Ending | None = None
    if status == "ended":
        if raw.get("cancel_initiated_at"):
            ending = "cancelled"
        elif counts.get("expired"):
            ending = "expired"
        else:
            ending = "completed"
    return ProviderBatch(str(raw["id"]), status, ending, total - counts.get("processing", 0), total)


def line_of(raw: dict[str, Any], ending: Ending) -> ProviderLine:
    custom_id = str(raw.get("custom_id"))
    result = raw.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded":
        return ProviderLine(custom_id, "completed", 200, orjson.dumps(result.get("message")), None)
    if kind == "errored":
        error = result.get("error") or {}
        status = 400 if (error.get("error") or {}).get("type") == "invalid_request_error" else 500
        return ProviderLine(
            custom_id, "discarded", status, None, upstream_returned(status, orjson.dumps(error))
        )
    return never_ran(custom_id, "expired" if kind == "expired" else "cancelled")
