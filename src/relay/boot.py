"""The composition root: settings in, a running Relay out.

Everything long-lived (engine, change feed, catalog reloader, services, the two ASGI apps) is built
here once and passed explicitly; nothing is a module-level singleton and importing this module does no
work. ``serve`` runs both listeners in one event loop and owns the signal handling, so a SIGTERM stops
both planes together and runs the shutdown steps in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import uvicorn
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp

from relay.catalog import CatalogReloader
from relay.config import Settings, host_key_env, unknown_variables
from relay.control.app import build_control_app
from relay.control.apply import ApplyService
from relay.control.catalog import CatalogService
from relay.control.credential_routes import mount_credential_routes
from relay.control.keys import KeyService
from relay.control.tokens import TokenService, load_signer
from relay.inference.app import build_inference_app
from relay.secrets import ProvisionedSecrets, SecretBox, provision
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.store.notify import ChangeFeed, PostgresChangeFeed

log = logging.getLogger("relay.boot")


@dataclass
class Runtime:
    settings: Settings
    secrets: ProvisionedSecrets
    engine: AsyncEngine
    feed: ChangeFeed
    reloader: CatalogReloader
    catalog: CatalogService
    applier: ApplyService
    keys: KeyService
    tokens: TokenService
    box: SecretBox
    registry: CollectorRegistry
    inference_app: ASGIApp = field(init=False)
    control_app: ASGIApp = field(init=False)

    async def database_ok(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    async def start(self) -> None:
        if self.settings.migrate_on_boot:
            await upgrade_to_head(self.engine)
        self.tokens.attach_signer(await load_signer(self.engine, self.box))
        await self.reloader.start()

    async def stop(self) -> None:
        await self.reloader.stop()
        await self.engine.dispose()


def build_runtime(settings: Settings) -> Runtime:
    secrets = provision(settings)
    box = SecretBox(secrets.master_key)
    engine = create_engine(settings.database_url)
    feed: ChangeFeed = PostgresChangeFeed(settings.database_url) if settings.is_postgres else ChangeFeed()
    reloader = CatalogReloader(engine, feed, box, host_key_env())
    catalog = CatalogService(engine, box, reloader.reload)
    registry = CollectorRegistry()
    revision = Gauge("relay_catalog_revision", "Catalog revision this replica serves", registry=registry)
    revision.set_function(lambda: reloader.snapshot.revision)
    runtime = Runtime(
        settings=settings,
        secrets=secrets,
        engine=engine,
        feed=feed,
        reloader=reloader,
        catalog=catalog,
        applier=ApplyService(engine, catalog, box),
        keys=KeyService(engine, catalog),
        tokens=TokenService(engine, catalog),
        box=box,
        registry=registry,
    )
    runtime.inference_app = build_inference_app(runtime.database_ok, lambda: reloader.snapshot)
    runtime.control_app = build_control_app(
        admin_token=secrets.admin_token,
        catalog=catalog,
        applier=runtime.applier,
        reloader=reloader,
        registry=registry,
        extra_routes=lambda app, admin: mount_credential_routes(app, runtime.keys, runtime.tokens, admin),
    )
    return runtime


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: ``serve`` stops both listeners together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listener(app: ASGIApp, settings: Settings, port: int) -> _Server:
    config = uvicorn.Config(
        app,
        host=settings.bind,
        port=port,
        loop="none",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s)),
    )
    return _Server(config)


async def serve(settings: Settings, *, on_ready: Callable[[Runtime], Awaitable[None]] | None = None) -> None:
    if settings.is_postgres and settings.redis_url is None:
        log.warning(
            "RELAY_REDIS_URL is unset with Postgres: rate limits, breakers and key selection are per replica"
        )
    for name in unknown_variables():
        log.warning("%s is not a Relay setting (a typo?); it is ignored", name)
    runtime = build_runtime(settings)
    for note in runtime.secrets.generated:
        log.warning(note)
    if not runtime.secrets.generated and runtime.secrets.admin_token_path is not None:
        log.info("admin token: see %s", runtime.secrets.admin_token_path)
    try:
        await runtime.start()
    except (OSError, DBAPIError) as exc:
        await runtime.engine.dispose()
        raise StartupError(_startup_problem(settings, exc)) from None
    servers = [_listener(runtime.inference_app, settings, settings.port)]
    if settings.control_port is not None:
        servers.append(_listener(runtime.control_app, settings, settings.control_port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    for server in servers:
        # uvicorn exposes readiness only as a flag; poll it briefly (startup takes milliseconds).
        while not server.started and not any(t.done() for t in tasks):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    if on_ready is not None and all(s.started for s in servers):
        await on_ready(runtime)
    control = (
        f"http://{_display_host(settings.bind)}:{settings.control_port}" if settings.control_port else "off"
    )
    log.info(
        "relay %s serving inference on http://%s:%d, control on %s (revision %d)",
        settings.instance_id,
        _display_host(settings.bind),
        settings.port,
        control,
        runtime.reloader.snapshot.revision,
    )
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    log.info("relay %s stopping", settings.instance_id)
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    await runtime.stop()
    failed = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    if failed:
        raise failed[0]  # type: ignore[misc]
    if not stop.is_set() and any(not s.started for s in servers):
        raise SystemExit("a listener failed to start (is the port in use?)")


class StartupError(ValueError):
    """Relay cannot start; the message is one line that says what to fix."""


def _startup_problem(settings: Settings, exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if isinstance(exc, OSError) or "connect" in detail.lower():
        return f"cannot reach the database at RELAY_DATABASE_URL ({_masked_url(settings)}): {detail}"
    if "no such table" in detail or "does not exist" in detail:
        return "the database schema is missing or old: run `relay migrate` (or let boot migrate)"
    return f"database error at start: {detail}"


def _masked_url(settings: Settings) -> str:
    return str(settings.masked()["RELAY_DATABASE_URL"])


def _display_host(bind: str) -> str:
    return "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
