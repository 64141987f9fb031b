"""How the HTTP boundaries answer a failure that escaped their handlers: a database that is away is a
503 with ``Retry-After`` (the client retries; SPEC: degraded, not broken), anything else a 500 — both
JSON, never a traceback on the wire.

The classification is :func:`relay.store.engine.is_transient` (connection refused or dropped, the
server shutting down or starting up, a pool that timed out, a busy SQLite file). Each app renders the
answer in its own error shape; this module only decides status, code, message and headers.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import TimeoutError as PoolTimeout

from relay.store.engine import is_transient

log = logging.getLogger("relay.store")

#: Seconds a client is asked to wait before retrying while the database is unreachable.
RETRY_AFTER_S = 2


def database_unavailable(exc: BaseException) -> bool:
    """Is this failure the database being unreachable (or too busy), rather than a bug?"""
    return isinstance(exc, PoolTimeout) or is_transient(exc)


def unavailable_or_internal(exc: BaseException, what: str) -> tuple[int, str, str, list[tuple[bytes, bytes]]]:
    """(status, code, message, extra headers) for an unhandled failure of ``what``; logs it."""
    if database_unavailable(exc):
        log.warning("%s: database unavailable (%s)", what, type(exc).__name__)
        return (
            503,
            "database_unavailable",
            "the database is unavailable; retry later",
            [(b"retry-after", str(RETRY_AFTER_S).encode())],
        )
    log.error("%s failed", what, exc_info=exc)
    return 500, "internal_error", "internal error", []
