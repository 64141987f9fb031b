"""The guardrail step (SPEC §20): ``check(stage, guardrails, texts) → Verdict`` for every matcher.

What it does. Runs a policy's guardrails of one stage over a list of texts, in the policy's order: a
regex or PII guardrail that matches either blocks (the first block ends the check) or replaces each
match (``[REDACTED]``, ``[REDACTED:<type>]``); a webhook guardrail posts ``{stage, texts, model,
project_id, request_id}`` and follows its answer (``allow`` | ``block`` | ``redact`` with the replaced
texts, same count). A webhook that times out, answers non-2xx or answers anything else is counted
(``relay_guardrail_webhook_failures_total``), logged, and follows its ``fail`` mode: ``open`` allows,
``closed`` blocks — never a 500. Each block or redaction is counted in
``relay_guardrail_actions_total`` and listed in the verdict for the usage event.

What it deliberately does not know: where texts live in a body (``texts``), streams (``window``), or
how a refusal is answered (the live handler and the batch runner).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from relay.domain.guardrails import Guardrail
from relay.errors import RelayError
from relay.request.guardrails.texts import slots
from relay.upstream import Upstream, UpstreamConnectionError, UpstreamTimeout

log = logging.getLogger("relay.guardrails")
BLOCKED = "guardrail_blocked"


class _Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Family(Protocol):
    def labels(self, *values: str) -> _Counter: ...


class GuardrailBlocked(RelayError):
    """A guardrail blocked the request (400) or the whole response (422, ``error.stage: output``)."""

    code = BLOCKED

    def __init__(self, guardrail: Guardrail, stage: str) -> None:
        message = (
            f"{BLOCKED}: {guardrail.name}: {guardrail.message}"
            if guardrail.message
            else (f"{BLOCKED}: {guardrail.name}")
        )
        super().__init__(message, status=400 if stage == "input" else 422)
        self.guardrail = guardrail.name
        self.stage = stage


@dataclass(slots=True)
class Verdict:
    texts: list[str]  # after every redaction (the input when nothing was redacted)
    blocked: Guardrail | None = None
    applied: list[dict[str, str]] = field(default_factory=list)  # the usage event's ``guardrails``

    @property
    def changed(self) -> bool:
        return any(a["action"] == "redact" for a in self.applied)


class Asked(NamedTuple):
    """Who a webhook is told the texts belong to (a tuple: built on every guarded request, read only
    when a webhook is asked)."""

    model: str
    project_id: str
    request_id: str


class GuardrailStep:
    def __init__(self, actions: _Family, webhook_failures: _Family, client: Upstream | None = None) -> None:
        """``client``: the process's upstream client, which webhook guardrails are posted through (a
        step without one has only regex and PII guardrails to run, as in the benches)."""
        self._actions = actions
        self._failures = webhook_failures
        self._client = client

    def acted(self, guardrail: Guardrail, stage: str, action: str, applied: list[dict[str, str]]) -> None:
        """Count one block or redaction and list it for the usage event."""
        self._actions.labels(guardrail.name, action).inc()
        applied.append({"name": guardrail.name, "stage": stage, "action": action})

    async def check(
        self, stage: str, guardrails: Sequence[Guardrail], texts: list[str], asked: Asked
    ) -> Verdict:
        verdict = Verdict(list(texts))
        for guardrail in guardrails:
            if guardrail.webhook is not None:
                action, replaced = await self._ask(guardrail, stage, verdict.texts, asked)
                if action == "redact" and replaced is not None and replaced != verdict.texts:
                    verdict.texts = replaced
                    self.acted(guardrail, stage, "redact", verdict.applied)
            elif guardrail.action == "block":
                action = "block" if any(guardrail.matches(t) for t in verdict.texts) else "allow"
            else:
                action = "allow"
                redacted = [guardrail.redacted(t) for t in verdict.texts]
                if redacted != verdict.texts:
                    verdict.texts = redacted
                    self.acted(guardrail, stage, "redact", verdict.applied)
            if action == "block":
                self.acted(guardrail, stage, "block", verdict.applied)
                verdict.blocked = guardrail
                return verdict
        return verdict

    async def _ask(
        self, guardrail: Guardrail, stage: str, texts: list[str], asked: Asked
    ) -> tuple[str, list[str] | None]:
        hook = guardrail.webhook
        assert hook is not None
        body = orjson.dumps(
            {
                "stage": stage,
                "texts": texts,
                "model": asked.model,
                "project_id": asked.project_id,
                "request_id": asked.request_id,
            }
        )
        try:
            answer = await asyncio.wait_for(self._post(hook.url, body), hook.timeout_ms / 1000)
            return _read_answer(answer, len(texts))
        except (TimeoutError, UpstreamTimeout, UpstreamConnectionError, ValueError) as exc:
            self._failures.labels(guardrail.name).inc()
            timed_out = isinstance(exc, TimeoutError | UpstreamTimeout)
            reason = "timed out" if timed_out else str(exc)[:200] or type(exc).__name__
            log.warning(
                "guardrail webhook failed",
                extra={
                    "guardrail": guardrail.name,
                    "reason": reason,
                    "fail": hook.fail,
                    "request_id": asked.request_id,
                },
            )
            return ("allow" if hook.fail == "open" else "block"), None

    async def _post(self, url: str, body: bytes) -> Any:
        assert self._client is not None, "webhook guardrails need the upstream client"
        response = await self._client.post(url, {"content-type": "application/json"}, body)
        raw = await response.read()
        if not 200 <= response.status < 300:
            raise ValueError(f"answered {response.status}")
        return orjson.loads(raw)


async def check_body(
    step: GuardrailStep, stage: str, guardrails: Sequence[Guardrail], body: Any, asked: Asked
) -> Verdict:
    """``check`` over every text of a parsed request or whole answer (``texts.slots``); unless blocked,
    the redacted texts are written back into ``body``. The one body step of live requests and batch
    items (SPEC §20)."""
    found = slots(body)
    if not found:
        return Verdict([])
    verdict = await step.check(stage, guardrails, [s.text for s in found], asked)
    if verdict.blocked is None and verdict.changed:
        for slot, text in zip(found, verdict.texts, strict=True):
            slot.set(text)
    return verdict


def _read_answer(answer: Any, count: int) -> tuple[str, list[str] | None]:
    """``(action, replaced texts)`` from a webhook's answer; ``ValueError`` for anything malformed."""
    if not isinstance(answer, dict) or answer.get("action") not in ("allow", "block", "redact"):
        raise ValueError('answer is not {"action": "allow" | "block" | "redact", ...}')
    action: str = answer["action"]
    if action != "redact":
        return action, None
    texts = answer.get("texts")
    if not isinstance(texts, list) or len(texts) != count or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"a redact answer must carry texts: {count} strings")
    return action, texts
