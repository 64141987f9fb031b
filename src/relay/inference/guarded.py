"""A live request under a policy with guardrails (SPEC §20): its input checked before the cache and any
upstream call, its whole answer checked before the caller sees it.

What it does. :func:`guard_input` runs the policy's input guardrails over every text the request
sends upstream and either raises :class:`GuardrailBlocked` (answered 400 in the caller's shape, no
upstream call) or writes the redacted texts back into the parsed request, which routing, the cache key
and the upstream call then use. :func:`guard_whole` does the same for a 2xx whole answer in the
caller's shape: blocked → a 422 error body with ``error.stage: "output"``; redacted → the re-encoded
answer. :func:`guarded_stream` picks what a stream passes through (a window, or held whole under an
output webhook). All of them list what acted in ``ctx.guardrails`` for the usage event.

What it deliberately does not know: matchers and webhooks (``relay.request.guardrails.step``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from relay.http.errors import error_body
from relay.request.guardrails.held import HeldEvents
from relay.request.guardrails.sse import GuardedEvents
from relay.request.guardrails.step import Asked, GuardrailBlocked, GuardrailStep, check_body
from relay.request.guardrails.window import StreamWindow

if TYPE_CHECKING:
    from relay.inference.live import RequestContext
    from relay.request.pipeline import Outcome


def _asked(ctx: RequestContext) -> Asked:
    assert ctx.principal is not None
    return Asked(ctx.model, ctx.principal.project_id, ctx.request_id)


async def guard_input(step: GuardrailStep, ctx: RequestContext, request: dict[str, Any]) -> None:
    assert ctx.principal is not None
    verdict = await check_body(step, "input", ctx.principal.policy.input_guardrails, request, _asked(ctx))
    ctx.guardrails.extend(verdict.applied)
    if verdict.blocked is not None:
        raise GuardrailBlocked(verdict.blocked, "input")
    if verdict.changed:
        ctx.body = orjson.dumps(request)  # a payload log keeps what was sent, not the matched text


async def guard_whole(step: GuardrailStep, ctx: RequestContext, body: bytes) -> bytes | GuardrailBlocked:
    """The answer to send (redacted or as it was), or the block to answer instead."""
    assert ctx.principal is not None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    verdict = await check_body(step, "output", ctx.principal.policy.output_guardrails, answer, _asked(ctx))
    ctx.guardrails.extend(verdict.applied)
    if verdict.blocked is not None:
        return GuardrailBlocked(verdict.blocked, "output")
    return orjson.dumps(answer) if verdict.changed else body


def guarded_stream(ctx: RequestContext, outcome: Outcome, window: int) -> GuardedEvents | HeldEvents | None:
    """What a 2xx stream passes through under a policy with output guardrails (SPEC §20), else None
    (nothing paid): every caller shape's stream, same-shape or translated. A policy with an output
    webhook has its streams held and checked whole (``held.py``); otherwise they are windowed."""
    principal = ctx.principal
    if principal is None or not principal.policy.output_guardrails or outcome.status != 200:
        return None
    guardrails = principal.policy.output_guardrails
    if any(g.webhook is not None for g in guardrails):
        return HeldEvents(ctx.inbound_shape)
    return GuardedEvents(ctx.inbound_shape, lambda: StreamWindow(guardrails, window))


async def settle_stream(step: GuardrailStep, ctx: RequestContext, guard: GuardedEvents | HeldEvents) -> bytes:
    """The guard's last bytes once the upstream has finished (a held stream: all of them)."""
    if isinstance(guard, GuardedEvents):
        return guard.finish()
    assert ctx.principal is not None
    return await guard.settle(step, ctx.principal.policy.output_guardrails, _asked(ctx))


def stream_acted(step: GuardrailStep, ctx: RequestContext, guard: GuardedEvents | HeldEvents) -> None:
    """Count and list what acted on the stream (once it has ended); a held stream's check did both."""
    if isinstance(guard, HeldEvents):
        ctx.guardrails.extend(guard.applied)
        return
    for guardrail in guard.acted:
        step.acted(guardrail, "output", "redact", ctx.guardrails)
    if guard.blocker is not None:
        step.acted(guard.blocker, "output", "block", ctx.guardrails)


def blocked_body(shape: str, exc: GuardrailBlocked) -> bytes:
    """The block in the caller's error shape; an output block also says ``error.stage: "output"``."""
    body = error_body(shape, status=exc.status, code=exc.code, message=exc.message)
    if exc.stage != "output":
        return body
    shaped = orjson.loads(body)
    shaped["error"]["stage"] = "output"
    return orjson.dumps(shaped)
