"""Logging setup: one line per event, JSON or human-readable (``RELAY_LOG_FORMAT``).

Nothing here decides what is logged; callers never pass credentials, key values or bodies.

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

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

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
            "msg": _message(record),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = bounded(self.formatException(record.exc_info), 64 * 1024)
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


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "sqlalchemy.engine", "aiosqlite", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
