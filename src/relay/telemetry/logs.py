"""Logging setup: one line per event, JSON or human-readable (``RELAY_LOG_FORMAT``).

Nothing here decides what is logged; callers never pass credentials, key values or bodies.

Libraries' lines get the same treatment: uvicorn's ``color_message`` extra (its message again, with
ANSI colour escapes) is never written, and the lifecycle lines uvicorn writes once per server
("Started server process", "Shutting down" …) are written once per process, although ``relay serve``
runs two servers (inference and control) that each write them.

Invariants: formatting never raises (a field no encoder can write — a lone surrogate, an object whose
``str`` fails — is escaped or replaced, so a hostile value can neither lose its line nor put a traceback
on stderr), and no field is longer than ``MAX_FIELD_CHARS`` (a 1 MB model name makes a short line, with
the original length said).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

# Record attributes that are not fields of the line: the standard ones, and uvicorn's ``color_message``
# (the message again, with ANSI escapes for a terminal).
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}

MAX_FIELD_CHARS = 1024
"""Longest string value in a log line; longer ones keep their head and say how long they were."""
MAX_MESSAGE_CHARS = 8192


def bounded(value: Any, limit: int = MAX_FIELD_CHARS) -> Any:
    """``value`` fit for a log line: long strings cut, unencodable characters escaped."""
    if type(value) is str and len(value) <= limit and value.isascii():
        return value  # the common case, first: ids, names, numbers as text
    if isinstance(value, str):
        if len(value) > limit:
            value = f"{value[:limit]}…(+{len(value) - limit} chars)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if value is None or isinstance(value, bool | int | float):
        return value
    try:
        return bounded(str(value), limit)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: bounded(v) for k, v in vars(record).items() if k not in _STANDARD}


def _message(record: logging.LogRecord) -> str:
    try:
        return bounded(record.getMessage(), MAX_MESSAGE_CHARS)
    except Exception:  # bad %-arguments: keep the template rather than lose the line
        return bounded(str(record.msg), MAX_MESSAGE_CHARS)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = bounded(self.formatException(record.exc_info), 64 * 1024)
        return _dumps(out)

    @staticmethod
    def info_line(logger: str, message: str, created: float, fields: dict[str, Any]) -> str:
        """The line :meth:`format` writes for an INFO record of ``logger`` with these extra ``fields``,
        built without the record (the access log's batches: ``relay.telemetry.access_log``)."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(created, UTC).isoformat(),
            "level": "info",
            "logger": logger,
            "message": message,
        }
        for key, value in fields.items():
            if key not in _STANDARD:
                out[key] = bounded(value)
        return _dumps(out)


def _dumps(out: dict[str, Any]) -> str:
    try:
        return orjson.dumps(out, default=str).decode()
    except Exception:  # pragma: no cover - bounded() makes every value encodable; last resort
        return json.dumps(out, default=repr, ensure_ascii=True)


class ConsoleFormatter(logging.Formatter):
    """Human-readable, with the structured fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = _message(record)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        try:
            line = super().format(record)
        except Exception:  # pragma: no cover - last resort: never lose the line
            line = f"{record.levelname} {record.name}: {bounded(str(record.msg))}"
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        return f"{line} {extras}" if extras else line


class OncePerProcess(logging.Filter):
    """Lets each of uvicorn's per-server lifecycle lines through once: ``relay serve`` runs two uvicorn
    servers in one process, and both write the same "Started server process [pid]", "Shutting down" …
    Other lines (errors, warnings) always pass. Bounded: only the templates below are remembered."""

    TEMPLATES = frozenset(
        (
            "Started server process [%d]",
            "Finished server process [%d]",
            "Waiting for application startup.",
            "Application startup complete.",
            "Waiting for application shutdown.",
            "Application shutdown complete.",
            "Shutting down",
        )
    )

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.TEMPLATES:
            return True
        line = (str(record.msg), repr(record.args))
        if line in self._seen:
            return False
        self._seen.add(line)
        return True


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    # On the logger that writes the lifecycle lines, not on the handler: every other line (the access
    # log's batches above all) reaches a handler with no filter to consult.
    lifecycle = logging.getLogger("uvicorn.error")
    for stale in [f for f in lifecycle.filters if isinstance(f, OncePerProcess)]:
        lifecycle.removeFilter(stale)
    lifecycle.addFilter(OncePerProcess())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "sqlalchemy.engine", "aiosqlite", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
