"""Which database errors a retry cannot fix, and how to log one without its SQL (the usage writer's
"never stops for one row", SPEC §8). Used through ``relay.store.usage``, which re-exports both."""

from __future__ import annotations

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError


def refused(exc: BaseException) -> bool:
    """True for errors retrying cannot fix: the database refused the rows (a duplicate key, a value out
    of range) or they could not even be bound. Anything else (connection lost, database restarting,
    table missing mid-migration) is an outage worth retrying."""
    if isinstance(exc, IntegrityError | DataError | OverflowError):  # sqlite3 raises OverflowError raw
        return True
    # A value no encoder can write (a lone surrogate: the drivers raise UnicodeEncodeError, raw or
    # wrapped) or bind (a NUL in Postgres text, a wrong type) is this row's fault, not an outage: retrying
    # it forever would stop every later event from being written (SPEC §8).
    orig = getattr(exc, "orig", None)
    if isinstance(exc, UnicodeError | ValueError | TypeError) or isinstance(orig, UnicodeError | ValueError):
        return True
    # asyncpg's data errors (value too long, out of range) arrive as plain DBAPIError: go by SQLSTATE
    # class 22 (data exception) or 23 (integrity constraint violation).
    sqlstate = str(getattr(getattr(exc, "orig", None), "sqlstate", None) or "")
    if sqlstate[:2] in ("22", "23"):
        return True
    return isinstance(exc, StatementError) and not isinstance(exc, DBAPIError)


def describe_error(exc: BaseException) -> str:
    """A loggable description: the driver's error class and first line, never the SQL or its parameters
    (which may hold captured bodies)."""
    orig = getattr(exc, "orig", None) or exc
    first_line = (str(orig).splitlines() or [""])[0][:200]
    return f"{type(orig).__name__}: {first_line}"
