"""An in-process batch engine for the pacing tests (SPEC §17): the real worker pool, runner, pipeline,
limiter and key pool over a real store (SQLite or Postgres), real shared state and the session's real
fake upstream on loopback. Only the catalog is hand-built (``tests.fixtures.snapshots``).

``PacingBed.submit`` writes a batch the way the batch service does (bodies in the ``files`` payload
store, then the rows) under one of the catalog's policies; ``finished`` polls until its items are final.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.runner import ItemRunner
from relay.batches.workers import WorkerPool
from relay.domain.batch_policy import BatchPolicy
from relay.domain.ids import mint_id
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.request.keypool import KeyPool
from relay.request.pipeline import Pipeline
from relay.request.ratelimit import RateLimiter
from relay.snapshot import HostKey, Policy, Snapshot
from relay.state import SharedState
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from relay.telemetry.metrics import BatchMetrics
from relay.upstream import Upstream
from tests.fixtures.snapshots import CatalogBuilder

MODEL = "pace-chat"


@dataclasses.dataclass
class Tenant:
    """A policy, the service account and relay key its batches are submitted with."""

    policy: Policy
    key_hash: str
    key_id: str
    account_id: str
    project_id: str
    team_id: str


class PacingBed:
    def __init__(self, engine: AsyncEngine, state: SharedState, upstream_url: str, payload_dir: Path) -> None:
        self.engine = engine
        self.state = state
        self.build = CatalogBuilder()
        self.host = self.build.host("pace-host", upstream_url)
        self.key: HostKey = self.build.host_key("pace-k1", self.host, "ok-pace-k1")
        model = self.build.model(MODEL)
        self.build.bind(model, self.host, upstream_name="gpt-pace")
        self.team = self.build.team()
        self.registry = CollectorRegistry()
        self.payloads = PayloadStores(FileStore(payload_dir), DatabaseStore(engine), "files")
        self.store = BatchStore(engine)
        self._snapshot: Snapshot | None = None

    def tenant(self, name: str, *, rules: tuple[dict[str, Any], ...] = (), **batch: Any) -> Tenant:
        policy = self.build.policy(name, keys=(self.key,), rules=rules)
        policy = self.build.change(policy, batch=BatchPolicy.model_validate(batch))
        project = self.build.project(name=f"prj-{name}", team=self.team, default_policy=policy)
        account = self.build.service_account(f"sa-{name}", project=project)
        key, _plaintext = self.build.key(name, account=account)
        self._snapshot = None
        return Tenant(policy, key.key_hash, key.id, account.id, project.id, self.team.id)

    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = self.build.snapshot()
        return self._snapshot

    async def submit(self, tenant: Tenant, items: int) -> str:
        batch_id = mint_id("batch")
        bodies = [
            orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"item {i}"}]})
            for i in range(items)
        ]
        await self.payloads.of("files").write_requests(batch_id, bodies)
        row = {
            "id": batch_id,
            "created_at": datetime.now(UTC),
            "owner": tenant.key_hash,
            "key_hash": tenant.key_hash,
            "token_claims": None,
            "policy_id": tenant.policy.id,
            "policy_name": tenant.policy.name,
            "project_id": tenant.project_id,
            "team_id": tenant.team_id,
            "principal_kind": "serviceaccount",
            "principal_id": tenant.account_id,
            "credential_kind": "key",
            "credential_id": tenant.key_id,
            "inbound_shape": "openai",
            "payload_store": "files",
        }
        await self.store.insert_batch(row, items)
        return batch_id

    async def states(self, batch_id: str) -> dict[str, int]:
        items = t.batch_items
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(items.c.state, func.count())
                .where(items.c.batch_id == batch_id)
                .group_by(items.c.state)
            )
            return {state: n for state, n in rows.all()}

    async def errors(self, batch_id: str) -> list[str]:
        items = t.batch_items
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(items.c.error).where(items.c.batch_id == batch_id, items.c.error.is_not(None))
            )
            return [row[0] for row in rows.all()]

    async def finished(self, batch_id: str, total: int, timeout_s: float = 60.0) -> dict[str, int]:
        """Poll until every item of the batch is final; its states."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = await self.states(batch_id)
            if sum(n for s, n in states.items() if s in ("completed", "discarded", "cancelled")) == total:
                return states
            assert time.monotonic() < deadline, f"batch {batch_id} not finished in {timeout_s} s: {states}"
            await asyncio.sleep(0.1)

    async def wait_for_states(self, batch_id: str, expected: dict[str, int], timeout_s: float = 60.0) -> None:
        """Poll until the batch's item states are exactly ``expected``."""
        deadline = time.monotonic() + timeout_s
        while (states := await self.states(batch_id)) != expected:
            assert time.monotonic() < deadline, f"batch {batch_id} never reached {expected}: {states}"
            await asyncio.sleep(0.1)

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    @asynccontextmanager
    async def pool(self, *, size: int = 1, item_timeout_s: float = 60.0) -> AsyncIterator[WorkerPool]:
        upstream = Upstream(timeout_s=10.0)
        await upstream.start()
        limiter = RateLimiter(self.state)
        pipeline = Pipeline(upstream, limiter, KeyPool(self.state))
        runner = ItemRunner(
            payloads=self.payloads,
            pipeline=pipeline,
            snapshot=self.snapshot,
            instance_id="pace-replica",
            item_timeout_s=item_timeout_s,
        )
        workers = WorkerPool(
            store=self.store,
            runner=runner,
            instance_id="pace-replica",
            size=size,
            metrics=BatchMetrics(self.registry, size),
        )
        await workers.start()
        try:
            yield workers
        finally:
            await workers.stop()
            await limiter.close()
            await upstream.close()
