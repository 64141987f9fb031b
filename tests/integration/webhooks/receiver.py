"""A real webhook receiver for tests: a threaded HTTP server on loopback (stdlib ``http.server``).

Each test uses its own path (``receiver.path()``), and tells the receiver how to answer it: a sequence
of statuses (the last one repeats), or to hang for a while before answering — counted per event
(``webhook-id``), so every event on a path gets the same treatment. Every request is recorded
with its headers and raw body, so tests verify signatures themselves (:func:`verify`, written from the
Standard Webhooks description, independently of Relay's signing code). The session-scoped
``receiver`` fixture (registered for every test by the root conftest) is one such server per worker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Plan:
    statuses: list[int] = field(default_factory=lambda: [200])
    hang_s: float = 0.0
    hang_count: int | None = None  # only the first n requests of an event hang (None: every one)
    served: dict[str, int] = field(default_factory=dict)  # requests answered, per webhook-id


class Receiver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[str, _Plan] = {}
        self._received: list[Received] = []
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver._received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    plan = receiver._plans.setdefault(self.path, _Plan())
                    event_id = self.headers.get("webhook-id", "")
                    served = plan.served.get(event_id, 0)
                    status = plan.statuses[min(served, len(plan.statuses) - 1)]
                    hang = plan.hang_s if plan.hang_count is None or served < plan.hang_count else 0.0
                    plan.served[event_id] = served + 1
                if hang:
                    receiver._release.wait(hang)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the caller gave up (a timeout): nothing to answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook-receiver", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def path(
        self, *, statuses: list[int] | None = None, hang_s: float = 0.0, hang_count: int | None = None
    ) -> str:
        """A fresh path answering each event's requests with ``statuses`` in turn (default 200), the
        first ``hang_count`` of them (default: all) after ``hang_s``."""
        path = f"/hook/{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._plans[path] = _Plan(statuses or [200], hang_s, hang_count)
        return path

    def answer(self, path: str, statuses: list[int]) -> None:
        """From now on, answer ``path`` with ``statuses`` in turn (the last one repeats)."""
        with self._lock:
            self._plans[path] = _Plan(statuses)

    def url(self, path: str) -> str:
        return self.base_url + path

    def received(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self._received if r.path == path]

    def wait(self, path: str, count: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.received(path)
            if len(got) >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Standard Webhooks verification, from its specification: the key is the base64 of a ``whsec_``
    secret (else the secret's bytes); ``webhook-signature`` lists ``v1,<sig>`` entries separated by
    spaces, one of which must equal base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))."""
    key = base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
    content = headers["webhook-id"].encode() + b"." + headers["webhook-timestamp"].encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    for entry in headers["webhook-signature"].split(" "):
        version, _, sig = entry.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return True
    return False


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()
