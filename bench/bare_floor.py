"""Where is the floor of a Python proxy on this machine? The thinnest proxy Python can run, measured
next to the floor proxy on Relay's stack (``bench/floor_proxy.py``) and to calling the upstream
directly.

SPEC §13 and issue 33 ask for Relay's CPU per proxied request at a Go gateway's figures. A target below
what any Python process must spend to receive a request, forward it and answer is not reachable by
Relay's own work, whatever that work costs; this benchmark measures that floor. **bare** is a proxy
with no framework at all: an ``asyncio.Protocol`` on uvloop parsing requests with httptools (the C
parser uvicorn uses), answering with one pre-built header block and ``transport.write``, one task per
request, and the upstream client of ``--client`` (``relay``: Relay's own, ``relay.upstream``;
``aiohttp`` configured as Relay's client was before it; or ``pyreqwest``, when installed). It does
what the floor proxy does — read the body, parse it, rewrite ``model``, serialise, POST with the
upstream key, answer the whole body — and nothing else: no ASGI, no header or timeout bounds, no
streaming, no error handling beyond a 502. It is a measuring stick, not a server to run.

For each target (direct, the floor proxy, bare with each client found) and each load (wrk closed loop
at 1 and 16 connections), interleaved for ``--rounds`` rounds, it prints req/s, p50/p99 and the proxy
process's CPU per request (utime + stime from ``/proc`` around each run); medians over the rounds.

    .venv/bin/python bench/bare_floor.py [--duration 5] [--rounds 2] [--clients aiohttp,relay,pyreqwest]
    python bench/bare_floor.py --serve --upstream URL --upstream-key KEY --client aiohttp   # one proxy
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httptools
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

Post = Callable[[str, dict[str, str], bytes], Awaitable[tuple[int, bytes]]]


async def aiohttp_client() -> Post:
    import aiohttp

    session = aiohttp.ClientSession(  # as relay.upstream.Upstream configured aiohttp
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300),
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=300),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )

    async def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        response = await session.post(url, data=body, headers=headers, allow_redirects=False)
        try:
            return response.status, await response.read()
        finally:
            response.release()

    return post


async def pyreqwest_client() -> Post:
    from datetime import timedelta

    from pyreqwest.client import ClientBuilder

    client = (
        ClientBuilder()
        .connect_timeout(timedelta(seconds=10))
        .read_timeout(timedelta(seconds=300))
        .follow_redirects(False)
        .no_proxy()
        .build()
    )

    async def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        response = await client.post(url).headers(headers).body_bytes(body).build().send()
        return response.status, bytes(await response.bytes())

    return post


async def relay_client() -> Post:
    from relay.upstream import Upstream  # Relay's own client, as the pipeline calls it

    client = Upstream(timeout_s=300)
    await client.start()

    async def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        response = await client.post(url, headers, body)
        return response.status, await response.read()

    return post


CLIENTS = {"aiohttp": aiohttp_client, "pyreqwest": pyreqwest_client, "relay": relay_client}


class BareProxy(asyncio.Protocol):
    """One client connection: httptools calls back as the request arrives; a whole request becomes
    one task that forwards it and writes the answer."""

    def __init__(self, forward: Callable[[bytes], Awaitable[tuple[int, bytes]]]) -> None:
        self._forward = forward
        self._parser = httptools.HttpRequestParser(self)
        self._body: list[bytes] = []
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            assert self._transport is not None
            self._transport.close()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body, self._body = b"".join(self._body), []
        asyncio.get_running_loop().create_task(self._answer(body))

    async def _answer(self, body: bytes) -> None:
        try:
            status, answer = await self._forward(body)
        except Exception:
            status, answer = 502, b'{"error":"upstream failed"}'
        head = b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        assert self._transport is not None
        if not self._transport.is_closing():
            self._transport.write(head % (status, len(answer)) + answer)


async def serve(args: argparse.Namespace) -> None:
    post = await CLIENTS[args.client]()
    url = args.upstream.rstrip("/") + "/v1/chat/completions"
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "accept-encoding": "identity",
        "authorization": "Bearer " + args.upstream_key,
    }

    async def forward(body: bytes) -> tuple[int, bytes]:
        request = orjson.loads(body)
        request["model"] = args.model
        return await post(url, headers, orjson.dumps(request))

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    server = await asyncio.get_running_loop().create_server(lambda: BareProxy(forward), sock=sock)
    host, port = sock.getsockname()[:2]
    print(f"bare-proxy listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def measure(args: argparse.Namespace) -> None:
    from common import (
        CHAT_BODY,
        CpuMeter,
        Processes,
        find_wrk,
        machine_line,
        markdown_table,
        ms,
        run_wrk,
        start_announcing,
        start_fake_upstream,
        write_wrk_script,
    )
    from live_overhead import MODEL, UPSTREAM_KEY, start_floor_proxy

    wrk = find_wrk("wrk")
    if wrk is None:
        raise SystemExit("needs wrk (apt-get install wrk)")
    print(machine_line())
    body = orjson.dumps(CHAT_BODY)
    named = [c for c in args.clients.split(",") if c]
    clients = [c for c in named if c != "pyreqwest" or importlib.util.find_spec(c) is not None]
    rows: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-bare-") as tmp:
        fake, upstream = start_fake_upstream(procs)
        targets: list[tuple[str, str, int | None]] = [("direct", upstream, None)]
        floor, floor_url = start_floor_proxy(procs, upstream)
        targets.append(("floor proxy (uvicorn + Relay's client)", floor_url, floor.pid))
        for client in clients:
            cmd = [sys.executable, __file__, "--serve", "--upstream", upstream]
            cmd += ["--upstream-key", UPSTREAM_KEY, "--model", MODEL, "--client", client]
            process, url = start_announcing(procs, cmd, "bare-proxy")
            targets.append((f"bare ({client})", url, process.pid))
        headers = {"Authorization": f"Bearer {UPSTREAM_KEY}", "Content-Type": "application/json"}
        script = write_wrk_script(Path(tmp) / "post.lua", body, headers)
        for _ in range(args.rounds):
            for connections in (1, 16):
                for name, base, pid in targets:
                    url = base + "/v1/chat/completions"
                    run_wrk(wrk, url, script, connections, 1.0)  # warm-up
                    meter = CpuMeter({"proxy": pid or fake.pid})
                    meter.start()
                    result = run_wrk(wrk, url, script, connections, args.duration)
                    meter.stop()
                    cpu = meter.seconds["proxy"] * 1000 / max(result.requests, 1) if pid else float("nan")
                    rows.setdefault((name, connections), []).append(
                        (result.rps, result.p50_ms, result.p99_ms, cpu)
                    )
                    time.sleep(0.2)
    table = []
    for (name, connections), runs in rows.items():
        rps, p50, p99, cpu = (statistics.median(x[i] for x in runs) for i in range(4))
        cpu_text = "—" if cpu != cpu else f"{cpu:.3f}"
        table.append([name, str(connections), f"{rps:,.0f}", ms(p50), ms(p99), cpu_text])
    print(f"wrk, 1 thread; {args.rounds} round(s) of {args.duration:g} s per target and load; medians")
    print(
        markdown_table(
            ["target", "connections", "req/s", "p50 ms", "p99 ms", "proxy CPU ms/req"],
            table,
            [False, True, True, True, True, True],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", action="store_true", help="run one bare proxy (used by the measurement)")
    parser.add_argument("--upstream", default="")
    parser.add_argument("--upstream-key", default="")
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="aiohttp")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="aiohttp,relay,pyreqwest", help="bare proxies to measure")
    args = parser.parse_args()
    if args.serve:
        uvloop.run(serve(args))
    else:
        measure(args)


if __name__ == "__main__":
    main()
