"""What an upstream attempt's span says (SPEC §18): the OpenTelemetry GenAI conventions plus Relay's own.

One attempt span per upstream call, live or batch, built by the pipeline from the values below: the
attributes known when the call starts in one dict (the SDK validates a dict once), and what the answer
adds when it ends. Only attempt spans carry ``gen_ai.*``: a request's server span is not an LLM call.

What it deliberately does not know: the SDK (the span objects come from ``relay.telemetry.tracing_export``
through the request's trace), and bodies: nothing read here is sent anywhere but the names, counts and
finish reasons below — never a key, a token or message text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay.adapters import ANTHROPIC, EMBEDDINGS, OPENAI, OPENAI_RESPONSES, Usage, usage_from_response
from relay.adapters.json_codec import LARGE_BODY, loads

if TYPE_CHECKING:
    from relay.request.pipeline import Call
    from relay.snapshot import HostKey
    from relay.telemetry.tracing_export import RequestTrace


def attempt_attributes(call: Call, trace: RequestTrace, key: HostKey, attempt: int) -> dict[str, Any]:
    """The attributes of an attempt span known before the call is sent."""
    plan = call.plan
    operation = "embeddings" if call.shape == EMBEDDINGS else "chat"
    address, port = trace.server_of(plan.host.base_url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "anthropic" if plan.binding.adapter == ANTHROPIC else "openai",
        "gen_ai.request.model": plan.upstream_model,
        "server.address": address,
        "server.port": port,
        "relay.model": plan.model.name,
        "relay.host": plan.host.name,
        "relay.host_key_id": key.id,
        "relay.attempt": attempt,
    }
    if call.fallback_from is not None:
        attributes["relay.fallback_from"] = call.fallback_from
    return attributes


def span_name(call: Call) -> str:
    return ("embeddings " if call.shape == EMBEDDINGS else "chat ") + call.plan.upstream_model


def _finish_reasons(shape: str, parsed: dict[str, Any]) -> list[str]:
    if shape == OPENAI:
        choices = parsed.get("choices")
        if isinstance(choices, list):
            return [
                c["finish_reason"]
                for c in choices
                if isinstance(c, dict) and type(c.get("finish_reason")) is str
            ]
        return []
    if shape == ANTHROPIC:
        reason = parsed.get("stop_reason")
        return [reason] if type(reason) is str else []
    if shape == OPENAI_RESPONSES:
        status = parsed.get("status")
        return [status] if type(status) is str else []
    return []


def read_answer(shape: str, body: bytes, attributes: dict[str, Any]) -> Usage:
    """The usage of a whole 2xx answer, parsing it once for the span too: ``gen_ai.response.model``
    and ``gen_ai.response.finish_reasons`` join ``attributes``. A body too large to parse whole (a
    big embeddings answer) is metered the usual way and names no response model."""
    if len(body) > LARGE_BODY:
        return usage_from_response(shape, body)
    try:
        parsed = loads(body)
    except ValueError:
        return Usage()
    if not isinstance(parsed, dict):
        return Usage()
    model = parsed.get("model")
    if type(model) is str:
        attributes["gen_ai.response.model"] = model[:256]
    reasons = _finish_reasons(shape, parsed)
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    return usage_from_response(shape, parsed)


def usage_attributes(attributes: dict[str, Any], usage: Usage) -> dict[str, Any]:
    attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
    attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    return attributes
