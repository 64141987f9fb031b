"""The composition root: settings in, a runtime out (``serve`` runs it).

Everything long-lived (engine, change feed, catalog reloader, shared state, upstream client, usage
writer, services, the two ASGI apps) is built here once and passed explicitly; nothing is a
module-level singleton and importing this package does no work. One module per plane builds its
part: ``shared`` (what both planes stand on), ``batch_plane``, ``data_plane`` and ``control_plane``.

What it deliberately does not know: any logic. Every background loop is a
:class:`relay.background.Service`; the runtime starts them in the order listed here and stops them in
reverse, so migrations and the signing key come before the snapshot, the snapshot before serving, and
the usage writer is flushed before the database goes away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp

from relay.background import Services
from relay.boot.batch_plane import build_batch_plane
from relay.boot.control_plane import build_control_plane
from relay.boot.data_plane import build_inference_app
from relay.boot.shared import build_shared, foundation_services
from relay.config import Settings
from relay.control.services.apply import ApplyService
from relay.control.services.keys import KeyService
from relay.control.services.tokens import TokenService
from relay.crypto.sealing import ProvisionedSecrets
from relay.snapshot.reloader import CatalogReloader


@dataclass
class Runtime:
    settings: Settings
    secrets: ProvisionedSecrets
    engine: AsyncEngine
    reloader: CatalogReloader
    applier: ApplyService
    keys: KeyService
    tokens: TokenService
    services: Services  # every background service, in start order
    batch_workers: Services | None  # the worker pool and its liveness; None when RELAY_BATCH_WORKERS=0
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
        await self.services.start()

    async def stop_batch_workers(self) -> None:
        """Stop claiming batch items, let running ones finish (grace), put the rest back; idempotent."""
        if self.batch_workers is not None:
            await self.batch_workers.stop()

    async def stop(self) -> None:
        await self.services.stop()


def build_runtime(settings: Settings) -> Runtime:
    shared = build_shared(settings)
    batch = build_batch_plane(shared)
    keys = KeyService(shared.writes, shared.catalog)
    applier = ApplyService(shared.writes, shared.catalog, shared.box)
    runtime = Runtime(
        settings=settings,
        secrets=shared.secrets,
        engine=shared.engine,
        reloader=shared.reloader,
        applier=applier,
        keys=keys,
        tokens=shared.tokens,
        services=Services([*foundation_services(shared), *batch.services]),
        batch_workers=batch.workers,
    )
    runtime.inference_app = build_inference_app(shared, batch.mounts, runtime.database_ok)
    runtime.control_app = build_control_plane(
        shared, keys, applier, batch.batches, batch.files, deleter=batch.deleter
    )
    return runtime
