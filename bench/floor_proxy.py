"""The thinnest proxy on Relay's stack: the floor any Python gateway of this design pays.

``bench/live_overhead.py`` runs it as a third target next to *direct* and *relay*. What it does per
request is only what a gateway cannot skip: read the body, parse it and rewrite ``model``, serialise
it, send it upstream with the upstream key through a pooled client, and hand the answer back — whole,
or chunk by chunk for a stream. No authentication, routing, limits, key pool, usage event, metrics or
log line. It runs on the same parts as ``relay serve``, with the same settings: uvicorn on uvloop with
httptools, and Relay's own upstream client (``relay.upstream.Upstream``), so the floor moves with the
stack: whatever the client costs, the floor pays too.

Why it exists: on a small VM, part of what any proxy adds is the extra process hop itself — the proxy
must be woken, and must wake the upstream, and each wake-up of an idle vCPU is paid in latency. Relay
minus this floor is what Relay's own work costs; the floor minus direct is what the hop costs on this
machine, whatever the gateway.

    python bench/floor_proxy.py --upstream http://127.0.0.1:PORT --upstream-key KEY --port 0

Prints ``floor-proxy listening on http://127.0.0.1:<port>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

import orjson
import uvicorn
import uvloop

from relay.upstream import Upstream


class FloorProxy:
    def __init__(self, upstream: str, upstream_key: str, model: str) -> None:
        self._url = upstream.rstrip("/") + "/v1/chat/completions"
        self._key = "Bearer " + upstream_key
        self._model = model
        self._upstream = Upstream(timeout_s=300)  # as relay serve's default RELAY_UPSTREAM_TIMEOUT_S

    async def start(self) -> None:
        await self._upstream.start()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        request = orjson.loads(b"".join(parts))
        request["model"] = self._model
        stream = bool(request.get("stream"))
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if stream else "application/json",
            "accept-encoding": "identity",
            "authorization": self._key,
        }
        response = await self._upstream.post(self._url, headers, orjson.dumps(request))
        content_type = response.headers.get("content-type", "application/json").encode("latin-1")
        try:
            if not stream:
                body = await response.read()
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status,
                        "headers": [
                            (b"content-type", content_type),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": [(b"content-type", content_type)],
                }
            )
            async for chunk in response.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            response.discard()  # a no-op once read to its end


async def serve(args: argparse.Namespace) -> None:
    app = FloorProxy(args.upstream, args.upstream_key, args.model)
    await app.start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    config = uvicorn.Config(
        app, loop="none", http="httptools", lifespan="off", access_log=False, log_config=None
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    host, port = sock.getsockname()[:2]
    print(f"floor-proxy listening on http://{host}:{port}", flush=True)
    await task


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", required=True, help="base URL of the fake upstream")
    parser.add_argument("--upstream-key", required=True)
    parser.add_argument("--model", default="bench-model", help="the upstream model name to write")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    uvloop.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
