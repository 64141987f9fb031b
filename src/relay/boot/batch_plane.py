"""The batch plane, built once from Settings over what both planes share: payload stores, the batch
store with its finish hooks, the worker pool and its liveness, the expiry sweeper, the webhook
deliverer, the Files API and §14's finalizer, the batch deleter and the retention sweep (SPEC §17),
and the batch APIs mounted on the inference plane.

What it deliberately does not know: how the engine works (``relay.batches``) or what a façade answers
(``relay.batch_apis``); it only builds and connects them. Invariant: the background services are
listed in the order they start; the runtime stops them in reverse, so the expiry sweeper and §14's
finalizer stop before the worker pool they may ask to stop items, and the pool drains before the
Files API and the webhooks stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from starlette.types import ASGIApp

from relay.background import Service, Services, Stage
from relay.batch_apis.anthropic import PREFIXES as MESSAGE_BATCHES_PREFIXES
from relay.batch_apis.anthropic import MessageBatchesApp
from relay.batch_apis.anthropic_service import MessageBatches
from relay.batch_apis.files import PREFIXES as FILES_PREFIXES
from relay.batch_apis.files import FilesApp
from relay.batch_apis.files_service import FileService
from relay.batch_apis.idempotency import purge_expired
from relay.batch_apis.native import PREFIX as BATCHES_PREFIX
from relay.batch_apis.native import BatchesApp
from relay.batch_apis.openai import PREFIX as OPENAI_BATCHES_PREFIX
from relay.batch_apis.openai import OpenAIBatchesApp
from relay.batch_apis.openai_finalizer import (
    EndEvents,
    OpenAIFinalizer,
    finalizing_hook,
    output_files_remover,
)
from relay.batch_apis.openai_service import OpenAIBatches
from relay.batches.deleter import BatchDeleter
from relay.batches.expiry import ExpirySweeper
from relay.batches.hooks import FinishHooks, log_finished
from relay.batches.liveness import Liveness
from relay.batches.offload.poller import OffloadPoller
from relay.batches.offload.submit import OffloadAtSubmit
from relay.batches.retention import RetentionSweeper
from relay.batches.runner import ItemRunner
from relay.batches.service import BatchService
from relay.batches.workers import WorkerPool
from relay.boot.shared import Shared
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.request.batch_budget import BatchBudget
from relay.store.batch_queue import BatchStore
from relay.store.engine import database_unavailable
from relay.telemetry.metrics import BatchMetrics, RetentionMetrics, WebhookMetrics
from relay.upstream import Upstream
from relay.webhooks import outbox
from relay.webhooks.deliverer import Deliverer
from relay.webhooks.schedule import RetrySchedule


@dataclass
class BatchPlane:
    batches: BatchService
    files: FileService
    deleter: BatchDeleter  # SPEC §17: the one deletion of a finished batch (sweep, DELETE routes)
    mounts: Mapping[str, ASGIApp]  # the batch APIs, by path prefix, on the inference plane
    services: list[Service] = field(default_factory=list)  # in start order
    workers: Services | None = None  # the pool and its liveness; None when RELAY_BATCH_WORKERS=0


def build_batch_plane(shared: Shared) -> BatchPlane:
    settings = shared.settings
    # Both stores: new batches go to the configured one, each batch is read from the one it recorded.
    payloads = PayloadStores(
        FileStore(settings.batch_payload_dir, group_readable=settings.batch_payload_group_readable),
        DatabaseStore(shared.engine),
        settings.batch_payload_store,
    )
    batch_metrics = (
        BatchMetrics(shared.registry, settings.batch_workers) if settings.batch_workers > 0 else None
    )
    # Finish hooks (relay.batches.hooks: called inside the transaction that finishes a batch), built
    # here and passed to everything that finishes batches: completion webhooks (SPEC §10.10: the
    # events go to the outbox; the batch engine never imports webhooks), and §14: a finished
    # OpenAI-API batch waits for its files. The §14 batches' webhook events are stored in the
    # transaction of their end state (after files): the façade's end events.
    end_events = EndEvents(outbox.enqueue)
    hooks = FinishHooks(outbox.finish_hook, finalizing_hook(end_events), log_finished)  # the log line last
    batch_store = BatchStore(shared.engine, hooks)  # every batch SQL statement, with those hooks
    workers = (
        _worker_pool(shared, batch_store, payloads, batch_metrics) if settings.batch_workers > 0 else None
    )
    stop_running = workers[1].cancel_batch if workers is not None else None
    expiry = ExpirySweeper(
        batch_store,
        settings.batch_expiry_sweep_s,
        stop_running=stop_running,
        instance_id=settings.instance_id,
        housekeeping=lambda: purge_expired(shared.engine),  # §10.10 rows past their 24 h window
    )
    budget = BatchBudget(shared.state)  # SPEC §22: an offloaded batch's budgets, at submit and per item
    batches = BatchService(
        batch_store,
        payloads,
        max_items=settings.batch_max_items,
        max_json_depth=settings.max_json_depth,
        stop_running=stop_running,
        on_cancelled=batch_metrics.finished.labels("cancelled").inc if batch_metrics is not None else None,
        offload=OffloadAtSubmit(
            shared.snapshot, budget, default_max_tokens=settings.translate_default_max_tokens
        ),
    )
    poller = OffloadPoller(
        batch_store,
        payloads,
        shared.snapshot,
        shared.upstream,
        every_s=settings.offload_poll_s,
        budget=budget,
    )
    files = FileService(
        shared.engine, payloads, max_bytes=settings.batch_max_bytes, sweep_every_s=settings.files_sweep_s
    )
    retention = RetentionMetrics(shared.registry)
    deleter = BatchDeleter(
        shared.engine,
        payloads,
        retention,
        produced_files=output_files_remover(files),  # §14's outputs
    )
    openai_finalizer = OpenAIFinalizer(
        shared.engine, batches, files, settings.batch_finalize_poll_s, end_events=end_events
    )
    pool_services = _pool_services(*workers) if workers is not None else None
    return BatchPlane(
        batches=batches,
        files=files,
        deleter=deleter,
        mounts=_batch_apis(shared, batches, files, deleter),
        services=[
            *_webhook_services(shared),
            files,  # the Files API's expiry sweep, on every replica
            *([pool_services] if pool_services is not None else []),
            openai_finalizer,  # §14 output/error files, on every replica
            expiry,  # on every replica, whatever RELAY_BATCH_WORKERS
            poller,  # SPEC §22: on every replica; each due batch goes to one of them per round
            *_retention_sweep(shared, deleter, retention),
        ],
        workers=pool_services,
    )


def _worker_pool(
    shared: Shared, batch_store: BatchStore, payloads: PayloadStores, metrics: BatchMetrics | None
) -> tuple[Liveness, WorkerPool]:
    settings = shared.settings
    runner = ItemRunner(
        payloads=payloads,
        pipeline=shared.pipeline,  # the same object live requests use (ARCHITECTURE rule 5)
        snapshot=shared.snapshot,
        instance_id=settings.instance_id,
        item_timeout_s=settings.batch_item_timeout_s,
        translate_max_tokens=settings.translate_default_max_tokens,
        metrics=shared.metrics,  # upstream latency (source="batch"), tokens and cost, as live requests
        cache=shared.cache,  # SPEC §19: items use their policy's response cache like live requests
        tracer=shared.tracer,
        guardrails=shared.guardrails,  # SPEC §20: items pass their policy's guardrails like live requests
    )
    pool = WorkerPool(
        store=batch_store,
        runner=runner,
        instance_id=settings.instance_id,
        size=settings.batch_workers,
        grace_s=settings.shutdown_grace_s,
        metrics=metrics,
    )
    liveness = Liveness(
        store=batch_store,
        instance_id=settings.instance_id,
        orphans=pool.orphans,
        rescue_after_s=settings.batch_rescue_after_s,
        heartbeat_s=settings.batch_heartbeat_s,
        metrics=metrics,
    )
    return liveness, pool


def _pool_services(liveness: Liveness, pool: WorkerPool) -> Services:
    """The worker row exists before the pool claims and goes once the pool drained; heartbeats run
    while the pool claims."""
    return Services([Stage("batch worker row", liveness.register, liveness.forget), pool, liveness])


def _retention_sweep(shared: Shared, deleter: BatchDeleter, metrics: RetentionMetrics) -> list[Service]:
    """On every replica (one sweeps at a time), only when a retention is set: nothing runs otherwise."""
    settings = shared.settings
    if settings.batch_retention_days == 0 and settings.usage_retention_days == 0:
        return []
    sweeper = RetentionSweeper(
        shared.engine,
        deleter,
        metrics,
        batch_days=settings.batch_retention_days,
        usage_days=settings.usage_retention_days,
        every_s=settings.retention_sweep_s,
    )
    return [sweeper]


def _webhook_services(shared: Shared) -> list[Service]:
    """Every replica delivers (SPEC §10.10), on a client of its own (the webhook timeout)."""
    settings = shared.settings
    client = Upstream(timeout_s=settings.webhook_timeout_s, connect_timeout_s=settings.webhook_timeout_s)
    deliverer = Deliverer(
        engine=shared.engine,
        box=shared.box,
        client=client,
        instance_id=settings.instance_id,
        schedule=RetrySchedule(settings.webhook_retry_scale),
        slots=settings.webhook_concurrency,
        timeout_s=settings.webhook_timeout_s,
        metrics=WebhookMetrics(shared.registry),
        grace_s=min(settings.shutdown_grace_s, settings.webhook_timeout_s),
    )
    return [Stage("webhook client", client.start, client.close), deliverer]


def _batch_apis(
    shared: Shared, batches: BatchService, files: FileService, deleter: BatchDeleter
) -> dict[str, ASGIApp]:
    settings = shared.settings
    snapshot = shared.snapshot
    files_apps = {
        prefix: FilesApp(
            files, snapshot, settings.batch_max_bytes, prefix, database_unavailable=database_unavailable
        )
        for prefix in FILES_PREFIXES
    }
    message_batches = MessageBatches(
        shared.engine,
        batches,
        deleter,
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
            database_unavailable=database_unavailable,
        )
        for prefix in MESSAGE_BATCHES_PREFIXES
    }
    openai_batches = OpenAIBatches(batches, files, max_items=settings.batch_max_items)
    apps: dict[str, ASGIApp] = {
        BATCHES_PREFIX: BatchesApp(
            batches, snapshot, settings.batch_max_bytes, database_unavailable=database_unavailable
        ),
        **files_apps,
        **message_batches_apps,
        OPENAI_BATCHES_PREFIX: OpenAIBatchesApp(
            openai_batches, snapshot, settings.batch_max_bytes, database_unavailable=database_unavailable
        ),
    }
    tracer = shared.tracer
    if tracer is None:
        return apps
    return {prefix: tracer.asgi(app) for prefix, app in apps.items()}  # SPEC §18: a server span each
