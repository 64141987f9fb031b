"""A live request under a policy with a response cache (SPEC §19): look up, answer a hit, keep a miss.

What it does. :meth:`CachedAnswers.lookup` runs the cache step for a routed request: a bypass
(``Cache-Control: no-store`` / ``no-cache``, a stream under ``streams: false``) or a miss leaves the
request to the pipeline, marked so its answer says ``X-Relay-Cache`` and (unless ``no-store``) is
kept; a hit is admitted by the policy's ``requests`` and ``concurrency`` rules only and answered by
:meth:`answer` — the stored whole response in the caller's shape, or its SSE replay when the request
streams — with no upstream call. Its usage event says ``cache_hit``, cost 0, attempts 0, no host key
and the stored token counts. :meth:`keep` stores a miss's 2xx answer (whole, or the assembled stream)
before the response ends, so the caller's next request can hit it.

What it deliberately does not know: keys, stores and their failures (``relay.request.cache``), how a
miss is sent (``relay.inference.live``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import Send

from relay.adapters import OPENAI, Usage
from relay.adapters.replay import stream_of
from relay.http.wire import head, send_bytes
from relay.inference.recording import LiveRecorder
from relay.request.cache.step import BYPASS, HIT, MISS, CacheStep, Entry
from relay.request.pipeline import Outcome, Pipeline
from relay.request.reservations import Reservation
from relay.snapshot import Snapshot

if TYPE_CHECKING:
    from relay.inference.live import RequestContext


@dataclass(frozen=True, slots=True)
class Hit:
    entry: Entry
    body: bytes  # what the caller gets: the stored body, or its SSE replay
    reservation: Reservation


def _include_usage(shape: str, request: Mapping[str, Any]) -> bool:
    options = request.get("stream_options")
    return shape == OPENAI and isinstance(options, dict) and options.get("include_usage") is True


class CachedAnswers:
    def __init__(self, step: CacheStep, pipeline: Pipeline, recorder: LiveRecorder) -> None:
        self._step = step
        self._pipeline = pipeline
        self._recorder = recorder

    async def lookup(
        self, ctx: RequestContext, request: Mapping[str, Any], headers: Mapping[str, str]
    ) -> Hit | None:
        """A hit, admitted; or None (bypass or miss: ``ctx`` says which and where to keep the answer).
        Raises ``RateLimited`` when the policy's requests or concurrency rules refuse a hit."""
        step = self._step
        assert ctx.principal is not None
        lookup = step.lookup_for(ctx.principal, ctx.inbound_shape, request, headers, stream=ctx.streamed)
        ctx.cache = lookup
        if lookup is None or not lookup.read:
            ctx.cache_result = BYPASS
            step.counted(BYPASS)
            return None
        entry = await step.get(lookup)
        body = entry.body if entry is not None else b""
        if entry is not None and ctx.streamed:
            try:
                body = stream_of(
                    ctx.inbound_shape,
                    entry.body,
                    model=ctx.model,
                    include_usage=_include_usage(ctx.inbound_shape, request),
                )
            except (ValueError, KeyError):  # an entry this shape cannot replay: a miss, overwritten
                entry = None
        if entry is None:
            ctx.cache_result = MISS
            step.counted(MISS)
            return None
        reservation = await self._pipeline.admit_hit(ctx.principal)
        ctx.cache_result = HIT
        return Hit(entry, body, reservation)

    async def answer(self, ctx: RequestContext, hit: Hit, send: Send, snap: Snapshot) -> None:
        self._step.counted(HIT)
        marked = [(b"x-relay-cache", b"hit")]
        content_type = "text/event-stream" if ctx.streamed else hit.entry.content_type
        broken = None
        try:
            if ctx.streamed:
                await send(
                    head(200, content_type, ctx.request_id, [(b"cache-control", b"no-cache"), *marked])
                )
                await send({"type": "http.response.body", "body": hit.body, "more_body": False})
            else:
                await send_bytes(send, 200, hit.body, content_type, ctx.request_id, marked)
        except OSError:
            broken = "client disconnected"
        finally:
            await self._pipeline.release(hit.reservation)
        outcome = Outcome(200, content_type, hit.body, None, 0, None, hit.entry.usage, cache_hit=True)
        self._recorder.finished(ctx, outcome, snap, response_body=hit.body, broken=broken)

    async def keep(self, ctx: RequestContext, body: bytes, content_type: str, usage: Usage) -> None:
        """Store a miss's 2xx answer (whole, in the caller's shape) under the request's key."""
        if ctx.cache is not None:
            await self._step.put(ctx.cache, Entry(body, content_type, usage))
