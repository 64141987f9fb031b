"""A live stream's answer, from the upstream's first chunk to the caller's last byte (SPEC §7, §7.3, §20).

What it does. Relays the upstream's SSE chunks as they come: translated to the caller's shape when the
request was (``CanonicalStream`` for ``/v1/generate``, ``TranslatingStream`` for a provider shape routed
to another adapter), then — under a policy with output guardrails — through the guard in the caller's
shape (``guarded.guarded_stream``: a window per text, or the whole stream held for an output webhook).
The response head waits for the guard's first bytes, so a block found before any event is a 422 JSON
in the caller's shape; a block after ends the stream with the shape's error event, nothing after it.
A stream that completed is kept in the response cache before the response ends (SPEC §19). An upstream
that breaks mid-stream ends the caller's stream (its shape's error event when translated).

What it deliberately does not know: parsing, auth, routing (``live.py``), matchers (``request.guardrails``).
Invariant: whatever happens, the stream is settled (``outcome.finish``) and recorded once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import Send

from relay.adapters import CANONICAL, CanonicalStream, TranslatingStream
from relay.adapters.replay import StreamAssembler
from relay.errors import RelayError
from relay.http.wire import head, send_bytes
from relay.inference.guarded import blocked_body, guarded_stream, settle_stream, stream_acted
from relay.request.guardrails.held import HeldEvents
from relay.request.guardrails.sse import GuardedEvents
from relay.request.guardrails.step import GuardrailStep
from relay.request.pipeline import Outcome
from relay.snapshot import Snapshot

if TYPE_CHECKING:
    from relay.inference.cached import CachedAnswers
    from relay.inference.live import RequestContext
    from relay.inference.recording import LiveRecorder


def answered_model(ctx: RequestContext, outcome: Outcome) -> str:
    """The ``model`` a translated answer names: the caller's, or after a fallback the model that
    answered (SPEC §4 step 5)."""
    if outcome.fallback_from is not None and ctx.plan is not None:
        return ctx.plan.model.name
    return ctx.model


def answer_headers(outcome: Outcome, ctx: RequestContext) -> list[tuple[bytes, bytes]]:
    """``X-Relay-Cache`` under a policy with a cache (SPEC §19), ``X-Relay-Fallback-From`` after a
    fallback answered (SPEC §4)."""
    headers = [(b"x-relay-cache", ctx.cache_result.encode())] if ctx.cache_result else []
    if outcome.fallback_from is not None:
        headers.append((b"x-relay-fallback-from", outcome.fallback_from.encode()))
    return headers


class _Sink:
    """Where a stream's bytes go: the head once (before the first bytes), the payload capture, the
    cache's assembler, the socket."""

    __slots__ = ("_assembler", "_capture", "_ctx", "_outcome", "_send", "headed")

    def __init__(
        self, ctx: RequestContext, outcome: Outcome, send: Send, capture: Any, assembler: Any
    ) -> None:
        self._ctx, self._outcome, self._send = ctx, outcome, send
        self._capture, self._assembler = capture, assembler
        self.headed = False

    async def head(self) -> None:
        if not self.headed:
            self.headed = True
            await self._send(
                head(
                    self._outcome.status,
                    "text/event-stream",
                    self._ctx.request_id,
                    [(b"cache-control", b"no-cache"), *answer_headers(self._outcome, self._ctx)],
                )
            )

    async def body(self, out: bytes) -> None:
        await self.head()
        if self._capture is not None:
            self._capture.add(out)
        if self._assembler is not None:
            self._assembler.feed(out)
        await self._send({"type": "http.response.body", "body": out, "more_body": True})

    async def end(self, tail: bytes = b"") -> None:
        await self.head()
        await self._send({"type": "http.response.body", "body": tail, "more_body": False})


class StreamAnswers:
    def __init__(
        self,
        recorder: LiveRecorder,
        cache: CachedAnswers | None,
        guardrails: GuardrailStep | None,
        window: int,
    ) -> None:
        self._recorder = recorder
        self._cache = cache
        self._guardrails = guardrails
        self._window = window

    async def answer(self, ctx: RequestContext, outcome: Outcome, send: Send, snap: Snapshot) -> None:
        assert outcome.chunks is not None and ctx.plan is not None
        translate: CanonicalStream | TranslatingStream | None = None
        if ctx.inbound_shape == CANONICAL:
            translate = CanonicalStream(ctx.plan.binding.adapter)
        elif ctx.translated:
            translate = TranslatingStream(
                ctx.plan.binding.adapter,
                ctx.inbound_shape,
                model=answered_model(ctx, outcome),
                include_usage=ctx.include_usage,
            )
        capture = self._recorder.capture(ctx, snap)
        assembler = (
            StreamAssembler(ctx.inbound_shape, ctx.model)
            if ctx.cache is not None and outcome.status == 200
            else None
        )
        sink = _Sink(ctx, outcome, send, capture, assembler)
        guard = guarded_stream(ctx, outcome, self._window)
        if guard is None:  # SPEC §20: a guarded stream's head waits for its first bytes (422 before one)
            await sink.head()
        broken: str | None = None
        try:  # from here on: whatever fails, the stream is settled (its lease is renewed until then)
            async for chunk in outcome.chunks:
                out = translate.feed(chunk) if translate is not None else chunk
                if guard is not None:
                    out = guard.feed(out)
                if out:
                    await sink.body(out)
                if guard is not None and guard.blocked is not None:
                    break
            else:
                tail = translate.finish() if translate is not None else b""
                if guard is not None:
                    assert self._guardrails is not None
                    tail = guard.feed(tail)
                    if guard.blocked is None:
                        tail += await settle_stream(self._guardrails, ctx, guard)
                if tail:
                    await sink.body(tail)
            if guard is not None and guard.blocked is not None:
                await self._blocked(ctx, outcome, guard, sink, send, snap, capture)
                return
            if assembler is not None:  # kept before the response ends: the caller's next request sees it
                assert self._cache is not None
                whole = assembler.finish(await outcome.finish())
                if whole is not None:
                    await self._cache.keep(ctx, whole, "application/json", outcome.usage)
            await sink.end()
        except RelayError as exc:  # the upstream broke mid-stream: the caller sees the stream end
            broken = exc.message
            await sink.end(translate.fail(exc.message) if isinstance(translate, TranslatingStream) else b"")
        except OSError:
            broken = "client disconnected"
        finally:
            await outcome.chunks.aclose()  # type: ignore[attr-defined]
            await outcome.finish()
        self._acted(ctx, guard)
        self._recorder.finished(ctx, outcome, snap, stream_capture=capture, broken=broken)

    async def _blocked(
        self,
        ctx: RequestContext,
        outcome: Outcome,
        guard: GuardedEvents | HeldEvents,
        sink: _Sink,
        send: Send,
        snap: Snapshot,
        capture: Any,
    ) -> None:
        """SPEC §20: a block found before the stream's first event answers 422 in the caller's shape;
        after it, the shape's error event (already sent) was the last one. The upstream call is priced."""
        blocked = guard.blocked
        assert blocked is not None
        self._acted(ctx, guard)
        outcome.error_kind = blocked.code
        if sink.headed:
            await sink.end()
            self._recorder.finished(ctx, outcome, snap, stream_capture=capture, blocked=blocked)
            return
        body = blocked_body(ctx.error_shape, blocked)
        await send_bytes(send, blocked.status, body, "application/json", ctx.request_id)
        self._recorder.finished(ctx, outcome, snap, response_body=body, blocked=blocked)

    def _acted(self, ctx: RequestContext, guard: GuardedEvents | HeldEvents | None) -> None:
        if guard is not None:
            assert self._guardrails is not None
            stream_acted(self._guardrails, ctx, guard)
