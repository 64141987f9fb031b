"""What both planes stand on, built once from Settings: secrets, the engine and its change feed, the
catalog reloader, metrics, shared state with its rate limiter, the upstream client, the usage writer
and the pipeline live requests and batch items both run.

What it deliberately does not know: either plane's apps or services (``boot.data_plane``,
``boot.batch_plane``, ``boot.control_plane``). Invariant: nothing here does I/O; the
:class:`relay.background.Service` list of :func:`foundation_services` does it at start, in order.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.background import Service, Stage
from relay.config import Settings, host_key_env
from relay.control.services.catalog import CatalogService
from relay.control.services.tokens import TokenService, load_signer
from relay.crypto.sealing import ProvisionedSecrets, SecretBox, provision
from relay.domain.credentials import hash_key
from relay.request.cache.step import CacheStep
from relay.request.guardrails.step import GuardrailStep
from relay.request.keypool import KeyPool
from relay.request.pipeline import Pipeline
from relay.request.ratelimit import LEASE_MARGIN_S, RateLimiter
from relay.snapshot import Snapshot
from relay.snapshot.reloader import CatalogReloader
from relay.state import RedisState, SharedState, open_state
from relay.state.response_cache import MemoryResponseCache, RedisResponseCache, ResponseCache
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.store.notify import ChangeFeed, PostgresChangeFeed
from relay.telemetry.metrics import Metrics, no_created_series
from relay.telemetry.tracing import start_tracing
from relay.upstream import Upstream
from relay.usage.writer import UsageWriter

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import Tracer

log = logging.getLogger("relay.boot")


@dataclass
class Shared:
    settings: Settings
    secrets: ProvisionedSecrets
    box: SecretBox
    engine: AsyncEngine
    writes: AsyncEngine  # the engine for control-plane writes (SQLite: BEGIN IMMEDIATE)
    feed: ChangeFeed
    reloader: CatalogReloader
    catalog: CatalogService
    tokens: TokenService
    registry: CollectorRegistry
    metrics: Metrics
    state: SharedState
    limiter: RateLimiter
    upstream: Upstream
    writer: UsageWriter
    pipeline: Pipeline
    cache: CacheStep  # the response cache (SPEC §19); only policies with a cache block reach it
    guardrails: GuardrailStep  # SPEC §20; only policies with guardrails reach it
    tracer: Tracer | None = None  # SPEC §18: None unless RELAY_OTEL_ENDPOINT is set

    def snapshot(self) -> Snapshot:
        return self.reloader.snapshot


def build_shared(settings: Settings) -> Shared:
    secrets = provision(settings)
    box = SecretBox(secrets.master_key)
    engine = create_engine(settings.database_url)
    feed: ChangeFeed = PostgresChangeFeed(settings.database_url) if settings.is_postgres else ChangeFeed()
    reloader = CatalogReloader(
        engine, feed, box, host_key_env(), admin_token_hash=hash_key(secrets.admin_token)
    )
    # Control-plane writes take SQLite's write lock when they begin, so a read-then-write transaction
    # never meets the usage writer's commits with "database is locked" (no-op on Postgres).
    writes = engine.execution_options(sqlite_begin="IMMEDIATE")
    catalog = CatalogService(writes, box, reloader.reload)
    no_created_series()  # before any metric exists: no counter exports a _created series
    registry = CollectorRegistry()
    revision = Gauge("relay_catalog_revision", "Catalog revision this replica serves", registry=registry)
    revision.set_function(lambda: reloader.snapshot.revision)
    metrics = Metrics(registry)
    state = open_state(
        settings.redis_url,
        timeout_s=settings.redis_timeout_s,
        max_connections=settings.redis_max_connections,
    )
    _register_mirror_gauge(state, registry)
    upstream = Upstream(timeout_s=settings.upstream_timeout_s)
    # A request's own deadline: one upstream timeout (a batch item: its item timeout). A concurrency
    # lease of a request that died, and a half-open probe, are held that long plus a few seconds.
    deadline_s = max(settings.upstream_timeout_s, settings.batch_item_timeout_s) + LEASE_MARGIN_S
    limiter = RateLimiter(
        state,
        lease_s=deadline_s,
        on_fail_open=lambda step: metrics.state_fail_open.labels(step).inc(),
    )
    pipeline = Pipeline(upstream, limiter, KeyPool(state, probe_hold_s=deadline_s), metrics)
    return Shared(
        settings=settings,
        secrets=secrets,
        box=box,
        engine=engine,
        writes=writes,
        feed=feed,
        reloader=reloader,
        catalog=catalog,
        tokens=TokenService(writes, catalog),
        registry=registry,
        metrics=metrics,
        state=state,
        limiter=limiter,
        upstream=upstream,
        writer=UsageWriter(engine, registry),
        pipeline=pipeline,
        cache=build_cache(settings, metrics),
        guardrails=GuardrailStep(metrics.guardrail_actions, metrics.guardrail_webhook_failures, upstream),
        # The exporter's thread starts here and only queues until a span ends; no I/O before then.
        tracer=start_tracing(settings, metrics.otel_spans_dropped),
    )


def build_cache(settings: Settings, metrics: Metrics) -> CacheStep:
    """The response cache's step over Redis when ``RELAY_REDIS_URL`` is set (shared by replicas), else
    over this process's LRU bounded by ``RELAY_CACHE_MAX_BYTES``. No I/O until a policy with a cache
    block sends it a request."""
    store: ResponseCache
    if settings.redis_url:
        store = RedisResponseCache(
            settings.redis_url,
            timeout_s=settings.redis_timeout_s,
            max_connections=settings.redis_max_connections,
            max_entry_bytes=settings.cache_max_entry_bytes,
        )
    else:
        store = MemoryResponseCache(
            max_bytes=settings.cache_max_bytes, max_entry_bytes=settings.cache_max_entry_bytes
        )
    return CacheStep(
        store,
        on_result=lambda result: metrics.cache_requests.labels(result).inc(),
        on_error=lambda op: metrics.cache_errors.labels(op).inc(),
    )


def _register_mirror_gauge(state: SharedState, registry: CollectorRegistry) -> None:
    if isinstance(state, RedisState):
        mirrored = Gauge(
            "relay_breaker_mirror",
            "1 while this replica reads breakers from its mirror (Redis change notifications subscribed); "
            "0 while every breaker read goes to Redis",
            registry=registry,
        )
        mirrored.set_function(lambda: 1.0 if state.mirroring else 0.0)


def foundation_services(shared: Shared) -> list[Service]:
    """Started first, in this order, and stopped last, in reverse (docs/architecture.md "Start-up
    order" / "Shutdown order"): the schema and signing key, the snapshot, shared state, the upstream
    pool, the usage writer (flushed before the database goes away)."""
    settings = shared.settings

    async def prepare_database() -> None:
        if settings.migrate_on_boot:
            await upgrade_to_head(shared.engine)
        shared.tokens.attach_signer(await load_signer(shared.engine, shared.box))

    async def open_state() -> None:
        if not await shared.state.ping():
            log.warning("RELAY_REDIS_URL does not answer: rate limits fail open, breakers are not shared")
        await shared.state.start()

    tracer = shared.tracer

    async def stop_tracing() -> None:  # last: the spans of the last requests and items go out too
        if tracer is not None:
            await asyncio.to_thread(tracer.shutdown)

    return [
        Stage("tracing", stop=stop_tracing),
        Stage("database", prepare_database, shared.engine.dispose),
        shared.reloader,
        Stage("shared state", open_state, shared.state.close),
        Stage("response cache", stop=shared.cache.store.close),
        Stage("rate limiter", stop=shared.limiter.close),  # its lease renewer stops before the state
        Stage("upstream client", shared.upstream.start, shared.upstream.close),
        shared.writer,
    ]
