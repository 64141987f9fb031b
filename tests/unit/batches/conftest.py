"""``ItemRunner`` in-process: a hand-built catalog on the session's fake upstream, the real request core
over in-memory state, and the batch's request bodies in a real payload directory (``tmp_path``).

``runner`` is a :class:`RunnerBench` per test: :meth:`RunnerBench.batch` writes a batch's items and
returns the :class:`BatchRecord` the queue would hand the runner (attribution of the relay key or token
recorded at submit); :meth:`RunnerBench.run` runs one of its items against the catalog as it is NOW
(tests change records after "submitting", as the control plane would).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.batches.item_result import ItemResult
from relay.batches.runner import ItemRunner
from relay.crypto.tokens import TokenClaims
from relay.domain.batch_record import BatchRecord
from relay.domain.ids import mint_id
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.snapshot import Policy, RelayKey, Snapshot
from relay.store.batch_queue import ClaimedItem
from relay.store.engine import create_engine
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.planes import CHAT_MODEL, PlaneCatalog, RequestCore, plane_catalog, request_core

ITEM_TIMEOUT_S = 5.0


@dataclass
class RunnerBench:
    catalog: PlaneCatalog
    core: RequestCore
    payloads: PayloadStores
    current: Snapshot
    runner: ItemRunner = field(init=False)

    def __post_init__(self) -> None:
        self.item_timeout(ITEM_TIMEOUT_S)

    def item_timeout(self, seconds: float) -> None:
        """Run items from now on with this ``RELAY_BATCH_ITEM_TIMEOUT_S``."""
        self.runner = ItemRunner(
            payloads=self.payloads,
            pipeline=self.core.pipeline,
            snapshot=lambda: self.current,
            instance_id="replica-unit",
            item_timeout_s=seconds,
        )

    def refresh(self) -> None:
        """Serve the catalog's records as they are now (a reload after a control-plane change)."""
        self.current = self.catalog.snapshot()

    async def batch(
        self,
        items: list[Any],
        *,
        shape: str = "openai",
        key: RelayKey | None = None,
        token: TokenClaims | None = None,
        policy: Policy | None = None,
    ) -> BatchRecord:
        """A batch of ``items`` (dicts are JSON-encoded, bytes kept as they are) submitted by ``key``
        (default: the catalog's) or ``token``, under ``policy`` (default: the catalog's)."""
        c = self.catalog
        policy = policy or c.policy
        bodies = [item if isinstance(item, bytes) else orjson.dumps(item) for item in items]
        batch_id = mint_id("batch")
        await self.payloads.of("files").write_requests(batch_id, bodies)
        if token is not None:
            claims: dict[str, Any] | None = {
                name: getattr(token, name)
                for name in ("user_id", "project_id", "version", "jti", "issued_at", "expires_at")
            }
            key_hash, owner, kind, principal_id = None, f"user:{token.user_id}", "user", token.user_id
            credential_kind, credential_id = "token", token.jti
        else:
            relay_key = key or c.relay_key
            claims, key_hash, owner = None, relay_key.key_hash, relay_key.key_hash
            kind, principal_id, credential_kind, credential_id = (
                "serviceaccount",
                c.account.id,
                "key",
                relay_key.id,
            )
        return BatchRecord(
            id=batch_id,
            owner=owner,
            key_hash=key_hash,
            token_claims=claims,
            policy_id=policy.id,
            policy_name=policy.name,
            project_id=c.project.id,
            team_id=c.team.id,
            principal_kind=kind,
            principal_id=principal_id,
            credential_kind=credential_kind,
            credential_id=credential_id,
            inbound_shape=shape,
            status="queued",
            total_items=len(bodies),
            created_at=datetime.now(UTC),
            completed_at=None,
        )

    async def run(self, batch: BatchRecord, idx: int = 0) -> ItemResult:
        return await self.runner.execute(ClaimedItem(batch, idx))


def chat(model: str = CHAT_MODEL, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello there"}], **fields}


@pytest.fixture
async def runner(fake: FakeUpstream, tmp_path: Path) -> AsyncIterator[RunnerBench]:
    catalog = plane_catalog(fake.base_url)
    # Every batch here keeps its bodies in files; the database store is built as boot builds it but
    # never asked (its engine opens no connection until used).
    engine = create_engine(f"sqlite:///{tmp_path / 'unused.db'}")
    payloads = PayloadStores(FileStore(tmp_path / "payloads"), DatabaseStore(engine), "files")
    async with request_core() as core:
        bench = RunnerBench(catalog, core, payloads, catalog.snapshot())
        try:
            yield bench
        finally:
            payloads.close()
            await engine.dispose()
