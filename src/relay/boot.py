"""The composition root: settings in, a runtime out (``serve`` runs it).

Everything long-lived (engine, change feed, catalog reloader, shared state, upstream client, usage
writer, services, the two ASGI apps) is built here once and passed explicitly; nothing is a
module-level singleton and importing this module does no work. ``Runtime.start``/``stop`` order the
resources: migrations and the signing key before the snapshot, the snapshot before serving, the usage
writer flushed before the database goes away.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp

from relay.batch_apis.anthropic import PREFIXES as MESSAGE_BATCHES_PREFIXES
from relay.batch_apis.anthropic import MessageBatchesApp
from relay.batch_apis.anthropic_service import MessageBatches
from relay.batch_apis.files import PREFIXES as FILES_PREFIXES
from relay.batch_apis.files import FilesApp
from relay.batch_apis.files_service import FileService
from relay.batch_apis.native import PREFIX as BATCHES_PREFIX
from relay.batch_apis.native import BatchesApp
from relay.batch_apis.openai import PREFIX as OPENAI_BATCHES_PREFIX
from relay.batch_apis.openai import OpenAIBatchesApp
from relay.batch_apis.openai_finalizer import EndEvents, OpenAIFinalizer, finalizing_hook
from relay.batch_apis.openai_service import OpenAIBatches
from relay.batches.expiry import ExpirySweeper
from relay.batches.hooks import FinishHooks
from relay.batches.idempotency import purge_expired
from relay.batches.runner import ItemRunner
from relay.batches.service import BatchService
from relay.batches.workers import WorkerPool
from relay.config import Settings, host_key_env
from relay.control.app import build_control_app
from relay.control.dashboard import Dashboard, mount_dashboard
from relay.control.guard import ControlGuard
from relay.control.routes.batches import mount_batch_routes
from relay.control.routes.credentials import mount_credential_routes
from relay.control.routes.spend import mount_spend_routes
from relay.control.routes.usage import mount_usage_routes
from relay.control.routes.webhooks import mount_webhook_routes
from relay.control.services.apply import ApplyService
from relay.control.services.batches import BatchAdmin
from relay.control.services.catalog import CatalogService
from relay.control.services.health import HealthService
from relay.control.services.keys import KeyService
from relay.control.services.spend import spend_reader
from relay.control.services.throttle import LoginThrottle
from relay.control.services.tokens import TokenService, load_signer
from relay.control.services.usage import CapturedPayloads, UsageQueries
from relay.control.services.webhooks import WebhookDeliveries
from relay.crypto.sealing import ProvisionedSecrets, SecretBox, provision
from relay.inference.app import InferenceApp
from relay.inference.live import LiveHandler
from relay.inference.recording import LiveRecorder
from relay.payloads.base import FileStore, PayloadStores
from relay.payloads.database import DatabaseStore
from relay.request.keypool import KeyPool
from relay.request.pipeline import Pipeline
from relay.request.ratelimit import LEASE_MARGIN_S, RateLimiter
from relay.snapshot import Snapshot
from relay.snapshot.reloader import CatalogReloader
from relay.state import RedisState, SharedState, open_state
from relay.store.batch_queue import BatchStore
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.store.notify import ChangeFeed, PostgresChangeFeed
from relay.telemetry.metrics import BatchMetrics, Metrics, WebhookMetrics
from relay.upstream import Upstream
from relay.usage.writer import UsageWriter
from relay.webhooks import outbox
from relay.webhooks.deliverer import Deliverer
from relay.webhooks.schedule import RetrySchedule

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
    state: SharedState
    upstream: Upstream
    writer: UsageWriter
    inference_app: ASGIApp = field(init=False)
    control_app: ASGIApp = field(init=False)
    batch_workers: WorkerPool | None = None  # None when RELAY_BATCH_WORKERS=0
    files: FileService | None = None  # the Files API (SPEC §14), its expiry sweep on every replica
    batch_expiry: ExpirySweeper | None = None  # on every replica, whatever RELAY_BATCH_WORKERS
    webhooks: Deliverer | None = None  # every replica delivers (SPEC §10.10)
    webhook_client: Upstream | None = None
    openai_finalizer: OpenAIFinalizer | None = None  # §14 output/error files, on every replica
    limiter: RateLimiter | None = None  # its lease renewer stops at shutdown

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
        if not await self.state.ping():
            log.warning("RELAY_REDIS_URL does not answer: rate limits fail open, breakers are not shared")
        await self.state.start()
        await self.upstream.start()
        await self.writer.start()
        if self.batch_workers is not None:
            await self.batch_workers.start()
        if self.files is not None:
            self.files.start()
        if self.batch_expiry is not None:
            self.batch_expiry.start()
        if self.webhook_client is not None:
            await self.webhook_client.start()
        if self.webhooks is not None:
            await self.webhooks.start()
        if self.openai_finalizer is not None:
            self.openai_finalizer.start()

    async def stop_batch_workers(self) -> None:
        """Stop claiming batch items, let running ones finish (grace), put the rest back; idempotent."""
        if self.batch_workers is not None:
            await self.batch_workers.stop(self.settings.shutdown_grace_s)

    async def stop(self) -> None:
        if self.batch_expiry is not None:
            await self.batch_expiry.close()
        if self.openai_finalizer is not None:
            await self.openai_finalizer.close()
        await self.stop_batch_workers()
        if self.files is not None:
            await self.files.stop()
        if self.webhooks is not None:
            await self.webhooks.stop(min(self.settings.shutdown_grace_s, self.settings.webhook_timeout_s))
        if self.webhook_client is not None:
            await self.webhook_client.close()
        await self.writer.stop()
        await self.upstream.close()
        if self.limiter is not None:
            await self.limiter.close()
        await self.state.close()
        await self.reloader.stop()
        await self.engine.dispose()


def build_runtime(settings: Settings) -> Runtime:
    secrets = provision(settings)
    box = SecretBox(secrets.master_key)
    engine = create_engine(settings.database_url)
    feed: ChangeFeed = PostgresChangeFeed(settings.database_url) if settings.is_postgres else ChangeFeed()
    reloader = CatalogReloader(engine, feed, box, host_key_env())
    # Control-plane writes take SQLite's write lock when they begin, so a read-then-write transaction
    # never meets the usage writer's commits with "database is locked" (no-op on Postgres).
    writes = engine.execution_options(sqlite_begin="IMMEDIATE")
    catalog = CatalogService(writes, box, reloader.reload)
    registry = CollectorRegistry()
    revision = Gauge("relay_catalog_revision", "Catalog revision this replica serves", registry=registry)
    revision.set_function(lambda: reloader.snapshot.revision)
    metrics = Metrics(registry)
    state = open_state(
        settings.redis_url,
        timeout_s=settings.redis_timeout_s,
        max_connections=settings.redis_max_connections,
    )
    if isinstance(state, RedisState):
        mirrored = Gauge(
            "relay_breaker_mirror",
            "1 while this replica reads breakers from its mirror (Redis change notifications subscribed); "
            "0 while every breaker read goes to Redis",
            registry=registry,
        )
        mirrored.set_function(lambda: 1.0 if state.mirroring else 0.0)
    upstream = Upstream(timeout_s=settings.upstream_timeout_s)
    writer = UsageWriter(engine, registry)
    # A request's own deadline: one upstream timeout (a batch item: its item timeout). A concurrency
    # lease of a request that died, and a half-open probe, are held that long plus a few seconds.
    deadline_s = max(settings.upstream_timeout_s, settings.batch_item_timeout_s) + LEASE_MARGIN_S
    limiter = RateLimiter(
        state,
        lease_s=deadline_s,
        on_fail_open=lambda step: metrics.state_fail_open.labels(step).inc(),
    )
    pipeline = Pipeline(upstream, limiter, KeyPool(state, probe_hold_s=deadline_s), metrics)
    runtime = Runtime(
        settings=settings,
        secrets=secrets,
        engine=engine,
        feed=feed,
        reloader=reloader,
        catalog=catalog,
        applier=ApplyService(writes, catalog, box),
        keys=KeyService(writes, catalog),
        tokens=TokenService(writes, catalog),
        box=box,
        registry=registry,
        state=state,
        upstream=upstream,
        writer=writer,
        limiter=limiter,
    )

    def snapshot() -> Snapshot:
        return reloader.snapshot

    # Both stores: new batches go to the configured one, each batch is read from the one it recorded.
    payloads = PayloadStores(
        FileStore(settings.batch_payload_dir, group_readable=settings.batch_payload_group_readable),
        DatabaseStore(engine),
        settings.batch_payload_store,
    )
    batch_metrics = BatchMetrics(registry, settings.batch_workers) if settings.batch_workers > 0 else None
    # Finish hooks (relay.batches.hooks: called inside the transaction that finishes a batch), built
    # here and passed to everything that finishes batches: completion webhooks (SPEC §10.10: the
    # events go to the outbox; the batch engine never imports webhooks), and §14: a finished
    # OpenAI-API batch waits for its files. The §14 batches' webhook events are stored in the
    # transaction of their end state (after files): the façade's end events.
    end_events = EndEvents(outbox.enqueue)
    hooks = FinishHooks(outbox.finish_hook, finalizing_hook(end_events))
    batch_store = BatchStore(engine, hooks)  # every batch SQL statement, with those hooks
    runtime.webhook_client = Upstream(
        timeout_s=settings.webhook_timeout_s, connect_timeout_s=settings.webhook_timeout_s
    )
    runtime.webhooks = Deliverer(
        engine=engine,
        box=box,
        client=runtime.webhook_client,
        instance_id=settings.instance_id,
        schedule=RetrySchedule(settings.webhook_retry_scale),
        slots=settings.webhook_concurrency,
        timeout_s=settings.webhook_timeout_s,
        metrics=WebhookMetrics(registry),
    )
    if settings.batch_workers > 0:
        runner = ItemRunner(
            payloads=payloads,
            pipeline=pipeline,  # the same object live requests use (ARCHITECTURE rule 5)
            snapshot=snapshot,
            instance_id=settings.instance_id,
            item_timeout_s=settings.batch_item_timeout_s,
        )
        runtime.batch_workers = WorkerPool(
            store=batch_store,
            runner=runner,
            instance_id=settings.instance_id,
            size=settings.batch_workers,
            rescue_after_s=settings.batch_rescue_after_s,
            heartbeat_s=settings.batch_heartbeat_s,
            metrics=batch_metrics,
        )
    runtime.batch_expiry = ExpirySweeper(
        batch_store,
        settings.batch_expiry_sweep_s,
        stop_running=runtime.batch_workers.cancel_batch if runtime.batch_workers is not None else None,
        instance_id=settings.instance_id,
        housekeeping=lambda: purge_expired(engine),  # §10.10 rows past their 24 h window
    )
    batches = BatchService(
        batch_store,
        payloads,
        max_items=settings.batch_max_items,
        max_json_depth=settings.max_json_depth,
        stop_running=runtime.batch_workers.cancel_batch if runtime.batch_workers is not None else None,
        on_cancelled=batch_metrics.finished.labels("cancelled").inc if batch_metrics is not None else None,
    )

    runtime.files = FileService(
        engine, payloads, max_bytes=settings.batch_max_bytes, sweep_every_s=settings.files_sweep_s
    )
    files_apps = {
        prefix: FilesApp(runtime.files, snapshot, settings.batch_max_bytes, prefix)
        for prefix in FILES_PREFIXES
    }
    message_batches = MessageBatches(
        engine,
        batches,
        payloads,
        max_items=settings.batch_max_items,
        max_json_depth=settings.max_json_depth,
    )
    message_batches_apps = {  # SPEC §15, on both paths
        prefix: MessageBatchesApp(
            message_batches,
            snapshot,
            max_bytes=settings.batch_max_bytes,
            prefix=prefix,
            public_url=settings.public_url,
        )
        for prefix in MESSAGE_BATCHES_PREFIXES
    }
    openai_batches = OpenAIBatches(batches, runtime.files, max_items=settings.batch_max_items)
    runtime.openai_finalizer = OpenAIFinalizer(
        engine, batches, runtime.files, settings.batch_finalize_poll_s, end_events=end_events
    )

    runtime.inference_app = InferenceApp(
        live=LiveHandler(
            snapshot=snapshot,
            pipeline=pipeline,
            recorder=LiveRecorder(writer, metrics),
            translate_max_tokens=settings.translate_default_max_tokens,
            max_json_depth=settings.max_json_depth,
        ),
        snapshot=snapshot,
        database_ok=runtime.database_ok,
        max_request_bytes=settings.max_request_bytes,
        metrics=metrics,
        mounts={
            BATCHES_PREFIX: BatchesApp(batches, snapshot, settings.batch_max_bytes),
            **files_apps,
            **message_batches_apps,
            OPENAI_BATCHES_PREFIX: OpenAIBatchesApp(openai_batches, snapshot, settings.batch_max_bytes),
            **files_apps,
        },
    )

    admin_batches = BatchAdmin(engine, batches)
    webhook_deliveries = WebhookDeliveries(catalog, engine)
    # One for POST /api/auth/login and the dashboard's sign-in; counted across replicas with Redis.
    login_throttle = LoginThrottle(state if settings.redis_url else None)
    usage = UsageQueries(engine)
    spend = spend_reader(limiter, snapshot)
    dashboard = Dashboard(
        admin_token=secrets.admin_token,
        catalog=catalog,
        keys=runtime.keys,
        tokens=runtime.tokens,
        batches=admin_batches,
        batch_service=batches,
        usage=usage,
        health=HealthService(snapshot, state),
        secure_cookies=(settings.public_url or "").startswith("https://"),
        login_throttle=login_throttle,
        spend=spend,
        webhooks=webhook_deliveries,
        files=runtime.files,
    )

    def control_routes(app: FastAPI, admin: Any) -> None:
        mount_credential_routes(
            app,
            runtime.keys,
            runtime.tokens,
            admin,
            secure_cookies=(settings.public_url or "").startswith("https://"),
            throttle=login_throttle,
        )
        mount_usage_routes(app, usage, CapturedPayloads(engine, reloader.reload), admin)
        mount_spend_routes(app, spend, admin)
        mount_batch_routes(app, admin_batches, admin)
        mount_webhook_routes(app, webhook_deliveries, admin)
        mount_dashboard(app, dashboard)

    control = build_control_app(
        admin_token=secrets.admin_token,
        catalog=catalog,
        applier=runtime.applier,
        reloader=reloader,
        registry=registry,
        extra_routes=control_routes,
    )
    runtime.control_app = ControlGuard(
        control,
        admin_token=secrets.admin_token,
        max_bytes=settings.control_max_request_bytes,
        max_json_depth=settings.max_json_depth,
    )
    return runtime
