"""Runs the fake upstream under uvicorn, tuned for throughput (uvloop, httptools, no access log)."""

from __future__ import annotations

import socket
import sys

from .app import build_app
from .config import FakeConfig


def bind_socket(host: str, port: int) -> socket.socket:
    """Binds and listens before uvicorn starts, so ``--port 0`` can report the real port and clients that
    connect right after the "listening" line queue in the backlog instead of being refused."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def listening_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(host: str, port: int, config: FakeConfig) -> None:
    """Blocks serving until SIGINT/SIGTERM; prints ``fake-upstream listening on http://HOST:PORT`` first."""
    import uvicorn  # imported here so importing the package (e.g. for ``token_counts``) stays light

    sock = bind_socket(host, port)
    uv_config = uvicorn.Config(
        build_app(config),
        loop="uvloop",
        http="httptools",
        ws="none",
        lifespan="off",
        interface="asgi3",
        access_log=False,
        log_level="warning",
        proxy_headers=False,  # no middleware wrapper: the app needs uvicorn's own ``send`` (see asgi.py)
        server_header=False,
        backlog=2048,
    )
    server = uvicorn.Server(uv_config)
    print(f"fake-upstream listening on {listening_url(sock)}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
