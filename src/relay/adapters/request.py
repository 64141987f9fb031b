"""The upstream request of a same-shape call: path, headers, body — built, never copied from the caller.

What it knows (SPEC §7): the body goes upstream as the caller sent it with ``model`` replaced by the
binding's upstream name; the upstream key is sent as ``Authorization: Bearer`` (``openai``,
``openai_responses``, ``embeddings``) or ``x-api-key`` (``anthropic``); OpenAI chat streams get
``stream_options.include_usage`` so Relay can meter them (``relay.adapters.openai``).

Header policy — an allowlist, because it fails closed: a header nobody thought of is dropped, not leaked.
The upstream request carries exactly
  ``content-type: application/json`` (Relay serialised the body), ``accept`` (``text/event-stream`` for a
  stream, else ``application/json``), ``accept-encoding: identity`` (the stream tap and the usage reader
  must see plain bytes, and relaying them as they come means Relay never spends CPU inflating and
  re-compressing a body; the price is bandwidth on large non-stream bodies such as embeddings), the
  upstream credential, and for ``anthropic`` the caller's
  ``anthropic-version`` (default ``2023-06-01``) and ``anthropic-beta`` — the only caller headers that
  change the wire contract the caller expects back.
Everything else the caller sent is dropped, notably:
  - credentials: ``authorization``, ``x-api-key``, ``api-key``, ``cookie``, ``proxy-authorization`` —
    they are Relay credentials (or the caller's own), never the upstream's;
  - account scoping: ``openai-organization``, ``openai-project`` — they would point the operator's key at
    the caller's organisation (wrong billing, or a 401 that trips the key's breaker);
  - hop-by-hop (RFC 9110 §7.6.1): ``connection``, ``keep-alive``, ``proxy-*``, ``te``, ``trailer``,
    ``transfer-encoding``, ``upgrade`` — they describe the caller's connection, not Relay's;
  - ``host``, ``content-length`` — the HTTP client derives them from the upstream URL and the new body
    (a forwarded length would be wrong as soon as ``model`` is rewritten);
  - ``user-agent``, SDK telemetry (``x-stainless-*``), ``x-fake-*`` — Relay's own client identifies
    itself; tenants sharing an upstream account should not be fingerprinted through it. (The fake
    upstream's per-request knobs travel in the body's ``"fake"`` object, which is forwarded.)

What it deliberately does not know: hosts, base URLs, key selection, the HTTP client; cross-shape
translation (the canonical shape is translated first by ``relay.adapters.canonical``).

Invariants: the caller's dict is never mutated (shallow copies only, so a large body is not copied);
the returned body is the only serialisation of the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import anthropic, openai
from .base import ANTHROPIC, OPENAI, UPSTREAM_PATHS, UpstreamRequest
from .json_codec import dumps

_JSON = "application/json"
_EVENT_STREAM = "text/event-stream"


def build_upstream_request(
    shape: str,
    body: dict[str, Any],
    *,
    upstream_model: str,
    api_key: str,
    caller_headers: Mapping[str, str],
    stream: bool,
) -> UpstreamRequest:
    """The request to send to a binding speaking ``shape`` (``openai``, ``openai_responses``,
    ``anthropic`` or ``embeddings``). ``stream`` is ``wants_stream(body)`` of the same body.

    Raises ``ValueError`` for ``canonical`` or an unknown shape: translate with ``canonical_to`` first.
    """
    path = UPSTREAM_PATHS.get(shape)
    if path is None:
        raise ValueError(f"no upstream request for shape {shape!r}")
    upstream_body = {**body, "model": upstream_model}
    strip_usage_chunk = False
    if stream and shape == OPENAI:
        upstream_body, strip_usage_chunk = openai.request_stream_usage(upstream_body)
    headers = {
        "content-type": _JSON,
        "accept": _EVENT_STREAM if stream else _JSON,
        "accept-encoding": "identity",
    }
    if shape == ANTHROPIC:
        headers.update(anthropic.upstream_headers(api_key, caller_headers))
    else:
        headers["authorization"] = "Bearer " + api_key
    return UpstreamRequest(path, headers, dumps(upstream_body), strip_usage_chunk)
