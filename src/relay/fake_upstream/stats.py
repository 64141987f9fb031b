"""Request counters and a ring buffer of recent requests, for tests to see what the gateway sent.

Recording sits on the hot path of every benchmark request, so it only bumps three dict counters and
appends a small list to a deque; headers are kept as uvicorn's raw byte pairs and decoded only when a
test asks for them.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

LOG_SIZE = 500

# Entry layout (a list, so the status and the answer's time can be filled in once the response is
# decided). ``_ANSWERED`` lets a test see which requests were in flight together (SPEC §17
# ``max_concurrency``): a request is in flight from ``ts`` until ``answered``, after any fake latency.
_PATH, _METHOD, _HEADERS, _BODY, _KEY, _TS, _STATUS, _ANSWERED = range(8)


class Recorder:
    def __init__(self) -> None:
        self.total = 0
        self.by_path: dict[str, int] = {}
        self.by_key: dict[str, int] = {}
        self.by_status: dict[int, int] = {}
        self.log: deque[list[Any]] = deque(maxlen=LOG_SIZE)

    def record(
        self, path: str, method: str, headers: list[tuple[bytes, bytes]], body: Any, key: str | None
    ) -> list[Any]:
        """Counts the request and returns its log entry (pass it to ``set_status`` later)."""
        self.total += 1
        self.by_path[path] = self.by_path.get(path, 0) + 1
        if key is not None:
            self.by_key[key] = self.by_key.get(key, 0) + 1
        entry = [path, method, headers, body, key, time.time(), None, None]
        self.log.append(entry)
        return entry

    def set_status(self, entry: list[Any], status: int | None) -> None:
        """``None`` means the connection was dropped without a response."""
        entry[_STATUS] = status
        entry[_ANSWERED] = time.time()
        label = 0 if status is None else status
        self.by_status[label] = self.by_status.get(label, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.total,
            "by_path": dict(self.by_path),
            "by_key": dict(self.by_key),
            "by_status": {str(k): v for k, v in self.by_status.items()},
        }

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` requests, oldest first (so ``[-1]`` is the latest)."""
        entries = list(self.log)[-limit:] if limit > 0 else []
        return [
            {
                "path": e[_PATH],
                "method": e[_METHOD],
                "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in e[_HEADERS]},
                "body": e[_BODY],
                "key": e[_KEY],
                "ts": e[_TS],
                "status": e[_STATUS],
                "answered": e[_ANSWERED],
            }
            for e in entries
        ]

    def reset(self) -> None:
        self.total = 0
        self.by_path.clear()
        self.by_key.clear()
        self.by_status.clear()
        self.log.clear()
