"""A real guardrail webhook over loopback (SPEC §20): each path answers one way — ``allow``, ``block``,
``redact`` (every text upper-cased), ``garbage`` (not JSON), ``wrong`` (JSON of another shape),
``status`` (500) or ``slow`` (after 3 s) — and every request body is kept for the test to read."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HookServer:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.received.append({"path": self.path, **body})
                kind = self.path.strip("/").split("/")[0]
                status, answer = 200, b""
                if kind == "allow":
                    answer = b'{"action": "allow"}'
                elif kind == "block":
                    answer = b'{"action": "block"}'
                elif kind == "redact":
                    answer = json.dumps(
                        {"action": "redact", "texts": [t.upper() for t in body["texts"]]}
                    ).encode()
                elif kind == "garbage":
                    answer = b"<html>not json"
                elif kind == "wrong":
                    answer = b'{"action": "redact", "texts": []}'
                elif kind == "status":
                    status, answer = 500, b'{"action": "allow"}'
                elif kind == "slow":
                    server._release.wait(3)
                    answer = b'{"action": "allow"}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def bodies(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.received if r["path"].strip("/").startswith(kind)]

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
