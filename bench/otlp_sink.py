"""A local OTLP/HTTP trace sink for ``bench/live_overhead.py --otel``: accepts ``POST /v1/traces``,
answers 200 with an empty ``ExportTraceServiceResponse`` (an empty protobuf message is zero bytes) and
counts the exports and their bytes (``GET /stats``). It does not decode: its CPU is not Relay's, and a
benchmark of Relay's tracing cost must not wait on a slow collector.

    python bench/otlp_sink.py [--port 0]

Prints ``otlp-sink listening on http://127.0.0.1:<port>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the exporter reuses its connection
    exports = 0
    received_bytes = 0
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        self.rfile.read(size)
        with Sink.lock:
            Sink.exports += 1
            Sink.received_bytes += size
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        body = json.dumps({"exports": Sink.exports, "bytes": Sink.received_bytes}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Sink)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"otlp-sink listening on http://{host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
