"""How the batch engine's loops ride out a database outage: a group that failed on a transient error
(``relay.store.engine.is_transient``: a restart, a busy SQLite file) is retried, after a backoff of
0.2 s doubling to 5 s while the outage lasts. The work such a group holds lives only in memory, so
giving up would lose it.

What it deliberately does not know: what the group is. The loop (``relay.background.Loop``) waits and
retries; a step hands it the failure with :func:`retry_if_transient`; any other error stays the step's.
:func:`log_database_failure` is the one way the pool and its liveness log a failed claim or heartbeat.

Invariant: one warning per failed attempt, naming what failed, the error's type and the wait; a
traceback only for what is not an outage (a bug).
"""

from __future__ import annotations

import logging

from relay.background import Backoff, log_failure
from relay.store.engine import is_transient

log = logging.getLogger("relay.store")
batch_log = logging.getLogger("relay.batches")

FIRST_S = 0.2
MAX_S = 5.0


class DatabaseAway(Exception):
    """A group's statement failed on a transient database error; the message says what failed."""


def outage_backoff() -> Backoff:
    return Backoff(FIRST_S, MAX_S)


def retry_if_transient(exc: Exception, what: str) -> None:
    """Raise :class:`DatabaseAway` (the loop retries the group) when ``exc`` is transient; return
    when it is not (the step handles it)."""
    if is_transient(exc):
        raise DatabaseAway(what) from exc


def report_outage(name: str, exc: BaseException, delay: float) -> None:
    """A :class:`relay.background.Loop` failure report for the batch loops."""
    if isinstance(exc, DatabaseAway):
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        log.warning("%s failed (%s); retrying in %.1f s", exc, type(cause).__name__, delay)
    else:
        log_failure(name, exc, delay)


def log_database_failure(message: str, exc: BaseException) -> None:
    """One warning line for a database outage (it repeats while the outage lasts); a traceback for
    anything else, which is a bug."""
    if is_transient(exc):
        batch_log.warning("%s: %s", message, type(exc).__name__)
    else:
        batch_log.error(message, exc_info=exc)
