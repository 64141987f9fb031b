"""The access log: one line per finished request at ``info``, written off the request path.

Why. ``logger.info(...)`` per request walks the caller's stack for its file and line, takes the
handler's lock and writes and flushes the stream: one system call per request, on the event loop,
before the next request is read. Here a finished request only appends its fields (and the time it
finished) to a queue; a timer ``FLUSH_AFTER_S`` later formats every queued line as the handlers'
formatters do (the same JSON or console line as any other record of the ``relay.request`` logger; a
JSON line is built from the fields directly, without a ``LogRecord``) and writes them with one write
per handler. A request's line appears at most ``FLUSH_AFTER_S`` after
its last byte, in order.

Never lost silently. The queue holds at most ``max_pending`` lines; a line past that is dropped and
counted (``on_drop``: the ``relay_access_log_dropped_total`` counter), as is a batch the stream
refused (an ``OSError`` on write). :meth:`flush` runs at shutdown and at interpreter exit, so the last
lines are written too.

What it deliberately does not know: which fields a line has (``relay.inference.recording``), where
lines go (the handlers ``relay.telemetry.logs.configure_logging`` set on the root logger).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from relay.telemetry.logs import JsonFormatter

#: How long a line waits for its batch: short enough that a tail of the log looks live.
FLUSH_AFTER_S = 0.05
#: Lines kept while the writer is behind (a few seconds of a busy replica's traffic).
DEFAULT_MAX_PENDING = 20_000


class AccessLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        on_drop: Callable[[int], None],
        max_pending: int = DEFAULT_MAX_PENDING,
        flush_after_s: float = FLUSH_AFTER_S,
    ) -> None:
        self._logger = logger
        self._on_drop = on_drop
        self._max_pending = max_pending
        self._flush_after_s = flush_after_s
        self._pending: list[tuple[float, dict[str, Any]]] = []
        self._timer: asyncio.TimerHandle | None = None
        atexit.register(_flush_at_exit, weakref.ref(self))

    def enabled(self) -> bool:
        """Whether a request's line would be written (``info`` is on for the logger)."""
        return self._logger.isEnabledFor(logging.INFO)

    def write(self, fields: dict[str, Any]) -> None:
        """Queue one request's line (``fields``: the line's own fields; the message is ``request``)."""
        if len(self._pending) >= self._max_pending:
            self._on_drop(1)
            return
        self._pending.append((time.time(), fields))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_after_s, self.flush)

    def flush(self) -> None:
        """Write every queued line now (the timer's job; also at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        if not pending:
            return
        records: list[logging.LogRecord] | None = None
        for handler in _handlers(self._logger):
            if handler.level > logging.INFO:
                continue
            # A plain StreamHandler (what configure_logging installs) gets one write; any other
            # handler (a subclass such as a test's capture, a file or queue handler) its records.
            plain = type(handler) is logging.StreamHandler
            if plain and not handler.filters and type(handler.formatter) is JsonFormatter:
                assert isinstance(handler, logging.StreamHandler)
                self._write_json(handler, pending)
                continue
            if records is None:
                records = [self._record(created, fields) for created, fields in pending]
            if plain:
                assert isinstance(handler, logging.StreamHandler)
                self._write_batch(handler, records)
            else:
                for record in records:
                    handler.handle(record)

    def _record(self, created: float, fields: dict[str, Any]) -> logging.LogRecord:
        # makeRecord, not info(): no stack walk for a file and line nobody reads.
        record = self._logger.makeRecord(
            self._logger.name, logging.INFO, "", 0, "request", (), None, extra=fields
        )
        record.created = created
        record.msecs = int((created - int(created)) * 1000)
        return record

    def _write_json(
        self, handler: logging.StreamHandler[Any], pending: list[tuple[float, dict[str, Any]]]
    ) -> None:
        """JSON lines straight from the fields: what ``JsonFormatter`` writes, without a record each."""
        name, end = self._logger.name, handler.terminator
        self._write(handler, [JsonFormatter.info_line(name, "request", c, f) + end for c, f in pending])

    def _write_batch(self, handler: logging.StreamHandler[Any], records: list[logging.LogRecord]) -> None:
        lines = [handler.format(r) + handler.terminator for r in records if handler.filter(r)]
        self._write(handler, lines)

    def _write(self, handler: logging.StreamHandler[Any], lines: list[str]) -> None:
        if not lines:
            return
        with handler.lock or _NO_LOCK:
            try:
                handler.stream.write("".join(lines))
                handler.stream.flush()
            except (OSError, ValueError):  # ValueError: the stream is closed
                self._on_drop(len(lines))


def _flush_at_exit(ref: weakref.ReferenceType[AccessLog]) -> None:
    access_log = ref()
    if access_log is not None:
        access_log._timer = None  # its loop has ended; the lines are written without it
        access_log.flush()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers a record of ``logger`` reaches (its own, then its ancestors' while they propagate)."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    return found
