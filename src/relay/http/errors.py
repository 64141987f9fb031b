"""Every error answer Relay writes, in the caller's shape, and the one answer to an exception that
escaped a handler (SPEC §7, §11, §14, §15).

The shapes:
  OpenAI — every ``/v1/*`` and ``/openai/*`` route, whatever its wire shape (``openai``, ``embeddings``,
      ``canonical``, …): ``{"error": {"type": <type>, "code": <relay code>, "message": <message>}}``;
  Anthropic — the ``anthropic`` wire shape: ``{"type": "error", "error": {"type", "message"}}``
      (Anthropic's error object has no ``code``; ``X-Relay-Request-ID`` finds the log line);
  OpenAI's Files and Batches APIs (§14, :func:`openai_api_error`): a 400 raised as
      :class:`~relay.domain.openai_batches.BadParam` adds ``param``; every 400 and 404 is an
      ``invalid_request_error`` carrying Relay's code, as OpenAI's own APIs answer them;
  the control plane (§11, :func:`control_error`): ``{"error": {"code", "message"}}``.

The ``type`` per status is the vocabulary both providers document (the SDKs pick their exception class
by status; ``type`` is for clients that branch on it):

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

An exception no handler expected (:func:`escaped`) is a 503 ``database_unavailable`` with
``Retry-After`` when the database is away (the client retries: degraded, not broken), else a 500
``internal_error``; both are logged here, and neither ever puts a traceback on the wire.

What it deliberately does not know: routes and which shape a route speaks (the apps pass it), what
makes a database error transient (the store's ``database_unavailable``, handed in by the caller:
this package sits below the store), upstream error bodies (passed through or translated by
``relay.adapters``).

Invariants: every body is valid JSON of exactly the keys above; a message is the caller-safe text it
was given — never a body or a secret (SPEC §8); a 405 carries ``Allow``, a 429 and a 503 for a
database outage ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import orjson

from relay.domain.openai_batches import BadParam
from relay.errors import RateLimited, RelayError, Unavailable
from relay.http.wire import MethodNotAllowed

log = logging.getLogger("relay.http")

ANTHROPIC_SHAPE: Final = "anthropic"
"""The wire shape whose errors are Anthropic's: ``relay.adapters.ANTHROPIC``, the same string (that
package sits above this one; tests/unit/http/test_errors.py checks they agree). Every other shape's
errors are OpenAI's."""

RETRY_AFTER_S: Final = 2
"""Seconds a client is asked to wait before retrying while the database is unreachable."""

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


class DatabaseUnavailable(Unavailable):
    """What an exception that escaped a handler answers when it was the database being away."""

    code = "database_unavailable"

    def __init__(self) -> None:
        super().__init__("the database is unavailable; retry later")


def error_type(shape: str, status: int) -> str:
    """The ``error.type`` Relay answers for ``status`` in ``shape``'s error format (table above)."""
    types = _TYPES.get(status)
    if types is None:
        types = ("api_error", "api_error") if status >= 500 else ("invalid_request_error",) * 2
    return types[1] if shape == ANTHROPIC_SHAPE else types[0]


def error_body(shape: str, *, status: int, code: str, message: str) -> bytes:
    """The JSON error body for a caller speaking ``shape``."""
    kind = error_type(shape, status)
    if shape == ANTHROPIC_SHAPE:
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    return orjson.dumps({"error": {"type": kind, "code": code, "message": message}})


def relay_error_body(shape: str, exc: RelayError) -> bytes:
    """``exc`` in ``shape``'s error format."""
    return error_body(shape, status=exc.status, code=exc.code, message=exc.message)


def openai_api_error(exc: RelayError) -> bytes:
    """``exc`` as OpenAI's Files and Batches APIs answer it (§14): ``param`` on a :class:`BadParam`,
    400 and 404 as ``invalid_request_error`` with Relay's code, any other status as the live plane's
    OpenAI body (a 401 or a 503 reads the same on ``/openai/v1/files`` as on ``/v1/chat/completions``)."""
    error: dict[str, Any] = {"type": "invalid_request_error", "code": exc.code, "message": exc.message}
    if isinstance(exc, BadParam):
        return orjson.dumps({"error": {**error, "param": exc.param}})
    if exc.status in (400, 404):
        return orjson.dumps({"error": error})
    return relay_error_body("openai", exc)


def control_error(code: str, message: str) -> dict[str, Any]:
    """The control plane's error object (§11)."""
    return {"error": {"code": code, "message": message}}


def control_error_body(code: str, message: str) -> bytes:
    return orjson.dumps(control_error(code, message))


def retry_after(exc: RateLimited) -> bytes:
    """``Retry-After`` of a 429: whole seconds, rounded up, at least 1."""
    return str(max(1, int(exc.retry_after + 0.999))).encode()


def error_headers(exc: RelayError) -> list[tuple[bytes, bytes]]:
    """The headers an error answer adds: ``Allow`` on a 405, ``Connection: close`` on a 413 (the rest
    of the body is not worth receiving), ``Retry-After`` on a 429 and on a database outage's 503."""
    if isinstance(exc, MethodNotAllowed):
        return [(b"allow", ", ".join(exc.allowed).encode("latin-1"))]
    if exc.status == 405:
        return [(b"allow", b"POST")]
    if exc.status == 413:
        return [(b"connection", b"close")]
    if isinstance(exc, RateLimited):
        return [(b"retry-after", retry_after(exc))]
    if isinstance(exc, DatabaseUnavailable):
        return [(b"retry-after", str(RETRY_AFTER_S).encode())]
    return []


def escaped(
    exc: BaseException, what: str, database_unavailable: Callable[[BaseException], bool]
) -> RelayError:
    """The answer to ``exc``, which escaped the handler of ``what``: :class:`DatabaseUnavailable` when
    ``database_unavailable(exc)`` says the database is away (logged as a warning), else a 500
    ``internal_error`` (logged with its traceback)."""
    if database_unavailable(exc):
        log.warning("%s: database unavailable (%s)", what, type(exc).__name__)
        return DatabaseUnavailable()
    log.error("%s failed", what, exc_info=exc)
    return RelayError("internal error")
