"""Running Relay: both listeners in one event loop, signals, start-up errors as one line.

``boot`` builds the runtime; this module runs it. uvicorn's own signal handling is switched off so a
SIGTERM stops both planes together and the shutdown steps run in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from sqlalchemy.exc import DBAPIError
from starlette.types import ASGIApp

from relay.boot import Runtime, build_runtime
from relay.config import Settings, unknown_variables
from relay.http.errors import control_error_body, error_body
from relay.http.protocol import Bounds, Render, protocol_class, sweep
from relay.inference.app import error_shape_for
from relay.store.engine import startup_problem

log = logging.getLogger("relay.serve")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers (``serve`` stops both listeners together), ticking once
    a second instead of ten times: its tick refreshes the ``date`` header, which changes once a second,
    and checks ``should_exit``, whose setting now wakes it at once. Each tick woke an idle process
    (``bench/idle_cpu.py``: two listeners' ticks were about 3 ms of CPU a second)."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit_wanted = asyncio.Event()
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value:
            self._exit_wanted.set()

    async def main_loop(self) -> None:
        should_exit = await self.on_tick(0)
        while not should_exit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_wanted.wait(), 1.0)
            should_exit = await self.on_tick(0)  # a multiple of 10: the date header is refreshed

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listener(
    app: ASGIApp, settings: Settings, port: int, render: Render, *, client_address: bool
) -> _Server:
    """One uvicorn server on Relay's protocol. ``client_address``: the app reads the caller's address
    (the control plane's audit entries), so uvicorn resolves ``X-Forwarded-For`` from trusted proxies
    (``FORWARDED_ALLOW_IPS``); the inference plane never reads it and skips that middleware per request."""
    bounds = Bounds(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        header_timeout_s=settings.header_timeout_s,
        body_read_timeout_s=settings.body_read_timeout_s,
    )
    config = uvicorn.Config(
        app,
        host=settings.bind,
        port=port,
        loop="none",
        http=protocol_class(bounds, render),
        lifespan="off",
        access_log=False,
        log_config=None,
        proxy_headers=client_address,
        timeout_keep_alive=settings.keepalive_timeout_s,  # type: ignore[arg-type]
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s)),
    )
    return _Server(config)


def inference_error(path: str, status: int, code: str, message: str) -> bytes:
    """A protocol-level rejection on the inference plane, in the caller's shape (SPEC §7)."""
    return error_body(error_shape_for(path), status=status, code=code, message=message)


def control_error(path: str, status: int, code: str, message: str) -> bytes:
    """A protocol-level rejection on the control plane (SPEC §11's error shape)."""
    return control_error_body(code, message)


async def serve(settings: Settings, *, on_ready: Callable[[Runtime], Awaitable[None]] | None = None) -> None:
    if settings.is_postgres and settings.redis_url is None:
        log.warning(
            "RELAY_REDIS_URL is unset with Postgres: rate limits, breakers and key selection are per replica"
        )
    for name in unknown_variables():
        log.warning("%s is not a Relay setting (a typo?); it is ignored", name)
    # Listen first: a busy port is one line naming the setting, before any migration or worker starts.
    sockets = [listen(settings.bind, settings.port, "the inference plane", "RELAY_PORT")]
    if settings.control_port is not None:
        try:
            sockets.append(
                listen(settings.bind, settings.control_port, "the control plane", "RELAY_CONTROL_PORT")
            )
        except StartupError:
            sockets[0].close()
            raise
    try:
        runtime = build_runtime(settings)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    for note in runtime.secrets.generated:
        log.warning(note)
    if not runtime.secrets.generated and runtime.secrets.admin_token_path is not None:
        log.info("admin token: see %s", runtime.secrets.admin_token_path)
    try:
        await runtime.start()
    except (OSError, DBAPIError) as exc:
        await runtime.engine.dispose()
        for sock in sockets:
            sock.close()
        raise StartupError(_startup_problem(settings, exc)) from None
    _freeze_boot_objects()
    servers = [
        _listener(runtime.inference_app, settings, settings.port, inference_error, client_address=False)
    ]
    if settings.control_port is not None:
        control = _listener(
            runtime.control_app, settings, settings.control_port, control_error, client_address=True
        )
        servers.append(control)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, sockets, strict=True)]
    for server in servers:
        # uvicorn exposes readiness only as a flag; poll it briefly (startup takes milliseconds).
        while not server.started and not any(t.done() for t in tasks):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    sweepers = [asyncio.create_task(sweep(s.server_state), name="relay-http-deadlines") for s in servers]
    if on_ready is not None and all(s.started for s in servers):
        await on_ready(runtime)
    log.info(
        "relay %s serving inference on %s, control on %s (revision %d)",
        settings.instance_id,
        listening_on(settings.bind, settings.port),
        listening_on(settings.bind, settings.control_port) if settings.control_port else "off",
        runtime.reloader.snapshot.revision,
    )
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    log.info("relay %s stopping", settings.instance_id)
    # Batch workers stop claiming at once and drain while the listeners drain (SPEC §10.6).
    draining = asyncio.create_task(runtime.stop_batch_workers())
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*tasks, draining, return_exceptions=True)
    stopper.cancel()
    for sweeper in sweepers:
        sweeper.cancel()
    await runtime.stop()
    failed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    if failed:
        raise failed[0]  # type: ignore[misc]
    if not stop.is_set() and any(not s.started for s in servers):
        raise SystemExit("a listener failed to start (is the port in use?)")


class StartupError(ValueError):
    """Relay cannot start; the message is one line that says what to fix."""


def _startup_problem(settings: Settings, exc: BaseException) -> str:
    return startup_problem(exc, str(settings.masked()["RELAY_DATABASE_URL"]))


def local_host(bind: str) -> str:
    """The host a local client uses to reach a listener bound to ``bind``."""
    if bind in ("0.0.0.0", ""):
        return "127.0.0.1"
    if bind == "::":
        return "[::1]"
    return f"[{bind}]" if ":" in bind else bind


def listening_on(bind: str, port: int) -> str:
    """Where a listener is, truthfully: a wildcard bind says that every interface hears it."""
    if bind in ("0.0.0.0", "::", ""):
        shown = "[::]" if bind == "::" else "0.0.0.0"
        return f"{shown}:{port} (every interface; here: http://{local_host(bind)}:{port})"
    return f"http://{local_host(bind)}:{port}"


def listen(host: str, port: int, what: str, setting: str, hint: str = "") -> socket.socket:
    """A listening TCP socket on ``host:port``; a port in use (or a bad address) is a
    :class:`StartupError` naming the port and the setting that changes it, not uvicorn's traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} ({what}) is already in use on {host}: stop what holds it, "
                f"or {'pass' if setting.startswith('--') else 'set'} {setting} to a free port{hint}"
            ) from None
        raise StartupError(
            f"cannot listen on {host}:{port} ({what}; RELAY_BIND, {setting}): {exc.strerror or exc}"
        ) from None
    sock.setblocking(False)
    return sock


def _freeze_boot_objects() -> None:
    """Take what boot loaded (modules, the apps, the first catalog snapshot: tens of thousands of
    objects that live as long as the process) out of the garbage collector's generations.

    Why: a full (generation 2) collection scans every tracked object, and while it runs the event loop
    is stopped. On a serving replica one took 100–116 ms and landed in the p99 of every request in
    flight (bench/live_overhead.py at 16 connections: p99 85 ms); with the boot objects frozen the same
    collections take ~6 ms (p99 16 ms). The cost: garbage that boot objects form later (a first
    snapshot in a reference cycle, say) is never collected, a few MiB at most.
    """
    gc.collect()
    gc.freeze()
