"""Relay's own error answers in the caller's wire shape (SPEC §7), so the official SDKs raise their usual
exception classes with Relay's message.

What it knows: the two error shapes —
  OpenAI (``openai``, ``openai_responses``, ``embeddings``, ``canonical``, any other ``/v1/*`` route):
      ``{"error": {"type": <type>, "code": <relay code>, "message": <message>}}``
  Anthropic (``anthropic``): ``{"type": "error", "error": {"type": <type>, "message": <message>}}``
      (Anthropic's error object has no ``code``; the message carries the detail and the response's
      ``X-Relay-Request-ID`` finds the log line) —
and the ``type`` per status. The SDKs choose their exception class by status; ``type`` is for clients
that branch on it, so it uses the vocabulary both providers document:

  ======  ======================  ======================
  status  OpenAI shape ``type``   Anthropic shape ``type``
  ======  ======================  ======================
  400     invalid_request_error   invalid_request_error
  401     authentication_error    authentication_error
  403     permission_error        permission_error
  404     not_found_error         not_found_error
  409     invalid_request_error   invalid_request_error
  413     request_too_large       request_too_large
  422     invalid_request_error   invalid_request_error
  429     rate_limit_error        rate_limit_error
  500     api_error               api_error
  502     api_error               api_error
  503     api_error               overloaded_error
  504     timeout_error           timeout_error
  529     overloaded_error        overloaded_error
  other   4xx invalid_request_error, 5xx api_error (both shapes)
  ======  ======================  ======================

What it deliberately does not know: Relay's exception tree (the inference app maps ``RelayError`` to
status and code, then calls ``error_body``), upstream error bodies (passed through untouched).

Invariants: the output is always valid JSON of exactly the keys above; ``message`` is the caller-safe
text it was given — never a body or a secret (the callers' responsibility, SPEC §8).
"""

from __future__ import annotations

from typing import Final

from .base import ANTHROPIC
from .json_codec import dumps

_TYPES: Final[dict[int, tuple[str, str]]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    409: ("invalid_request_error", "invalid_request_error"),
    413: ("request_too_large", "request_too_large"),
    422: ("invalid_request_error", "invalid_request_error"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("api_error", "api_error"),
    502: ("api_error", "api_error"),
    503: ("api_error", "overloaded_error"),
    504: ("timeout_error", "timeout_error"),
    529: ("overloaded_error", "overloaded_error"),
}


def error_type(shape: str, status: int) -> str:
    """The ``error.type`` Relay answers for ``status`` in ``shape``'s error format (table above)."""
    types = _TYPES.get(status)
    if types is None:
        types = ("api_error", "api_error") if status >= 500 else ("invalid_request_error",) * 2
    return types[1] if shape == ANTHROPIC else types[0]


def error_body(shape: str, *, status: int, code: str, message: str) -> bytes:
    """The JSON error body for a caller speaking ``shape``."""
    kind = error_type(shape, status)
    if shape == ANTHROPIC:
        return dumps({"type": "error", "error": {"type": kind, "message": message}})
    return dumps({"error": {"type": kind, "code": code, "message": message}})
