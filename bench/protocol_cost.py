"""What does Relay's HTTP server layer cost per request, without sockets? (Issue 33: the server's share.)

``bench/cpu_profile.py`` puts uvicorn's protocol with the socket work under it at the top of a live
request's CPU, and ``live_overhead.py`` cannot tell a few µs of it from its noise. This drives one
``RelayHttpProtocol`` (``relay.http.protocol``, the inference listener's class, Relay's bounds on) over
an in-memory transport on uvloop: each request's bytes are fed to ``data_received`` and the ASGI app
answers through the same ``relay.http.wire`` helpers the live plane uses —

- **whole**: a keep-alive ``POST /v1/chat/completions`` of the benchmarks' shape (four headers, a
  107-byte body); the app reads the body and the headers and answers 500 bytes with a length;
- **stream**: the same request answered as a stream: a head without a length, nine 60-byte SSE events,
  the end.

Each figure is CPU time (``time.process_time``) per request over ``--iterations`` requests after a
warm-up: parsing, the scope, the request's task, ``receive``, ``send``, the keep-alive bookkeeping.
Nothing is written to a socket, so the kernel's share of a live request is not here.

``--base-src DIR`` (another checkout's ``src/``) measures that code too, interleaved, in fresh
processes; medians (min–max) over ``--rounds``. A benchmark, not a test: it prints, and exits 0.

    .venv/bin/python bench/protocol_cost.py [--iterations 20000] [--rounds 5] [--base-src ../base/src]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from translate_cost import compare

CASES = ("whole", "stream")
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
    b"Authorization: Bearer rk_abcdefghijklmnopqrstuvwxyz0123456789abcdef\r\n"
    b"Content-Type: application/json\r\nContent-Length: 107\r\n\r\n" + b"x" * 107
)
ANSWER = b"a" * 500
EVENT = b"data: " + b"e" * 52 + b"\n\n"


class MemoryTransport:
    """What the protocol writes is counted, not sent."""

    def __init__(self) -> None:
        self.writes = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def measure(iterations: int) -> dict[str, float]:
    """µs of CPU per request, on whichever ``relay`` PYTHONPATH gives this process."""
    import uvicorn
    import uvloop
    from uvicorn.server import ServerState

    from relay.http.protocol import Bounds, protocol_class
    from relay.http.wire import new_request_id, read_body, request_headers, send_bytes

    answered: dict[str, asyncio.Future[None]] = {}  # the current request's, set by the app

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await read_body(receive, scope, 1 << 20)
        request_headers(scope)
        request_id = new_request_id()
        if scope["path"] == "/v1/chat/completions":
            await send_bytes(send, 200, ANSWER, "application/json", request_id)
        else:
            start = {"type": "http.response.start", "status": 200}
            await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
            for _ in range(9):
                await send({"type": "http.response.body", "body": EVENT, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        answered["now"].set_result(None)

    async def run() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        bounds = Bounds(max_header_bytes=65536, max_headers=100, header_timeout_s=10, body_read_timeout_s=10)
        config = uvicorn.Config(
            app,
            loop="none",
            http=protocol_class(bounds, lambda *_: b"{}"),
            lifespan="off",
            access_log=False,
            log_config=None,
            proxy_headers=False,
        )
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Mon, 07 Dec 2026 20:00:00 GMT"), (b"server", b"uvicorn")]
        protocol = config.http_protocol_class(config=config, server_state=state, app_state={})
        protocol.connection_made(MemoryTransport())
        out: dict[str, float] = {}
        for case, request in (("whole", REQUEST), ("stream", REQUEST.replace(b"completions", b"stream"))):
            for count in (iterations // 10, iterations):
                started = time.process_time()
                for _ in range(count):
                    answered["now"] = loop.create_future()
                    protocol.data_received(request)
                    await answered["now"]
                    await asyncio.sleep(0)  # the task's own end, as the server's loop runs it
                out[case] = (time.process_time() - started) / count * 1e6
        return out

    return uvloop.run(run())


if __name__ == "__main__":
    compare(Path(__file__).resolve(), CASES, measure, __doc__)
