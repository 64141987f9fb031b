"""The offload poller (SPEC §22): on every replica, a ``background.Loop`` that claims the offloaded
batches due for a poll (``store.offload_batches.due_for_poll``: each to one replica per round) and
moves each one step on: send it, poll it, forward a cancel or an expiry, map its results.

What it does, per claimed batch. Not sent yet (``submitting``): read its items' bodies, name the
binding's upstream model in each, and create the provider batch with the key recorded at submit; a
refusal (4xx) gives the items back to Relay's workers with the reason (``run_on_gateway``); a batch
cancelled or expired before it was sent ends its items without calling the provider. Sent: poll it
and record the provider's state; while it runs, a cancel requested through a façade, or the batch's
``expires_at`` passing, is forwarded (``cancel``); once it ended, ``mapping.Mapper`` maps its lines.

Failures. A provider outage or an answer that cannot be read (``ProviderUnavailable``, or anything
else a round raises) changes nothing but the batch's next poll, held back exponentially from
``RELAY_OFFLOAD_POLL_S`` up to :data:`MAX_BACKOFF_S` (this replica's count; it starts over at the
next success). The state lives in the database, so a restart, or a replica killed mid-round, leaves
the batch to the next round of whichever replica is alive.

What it deliberately does not know: the providers' wire formats (``openai_api``, ``anthropic_api``),
SQL (the store's functions), HTTP servers.

Known limit: a replica killed after the provider accepted a create and before its id was recorded
sends the batch again next round; only the recorded one is mapped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import orjson

from relay.background import Loop
from relay.batches.offload.anthropic_api import AnthropicBatchAPI
from relay.batches.offload.decision import NATIVE_ENDPOINTS
from relay.batches.offload.mapping import Mapper, Mapping
from relay.batches.offload.openai_api import OpenAIBatchAPI
from relay.batches.offload.provider import ProviderBatchAPI, ProviderRefused, ProviderUnavailable
from relay.domain.batch_record import BatchRecord
from relay.payloads.base import PayloadStores
from relay.request.batch_budget import BatchBudget
from relay.request.routing import Plan
from relay.snapshot import Snapshot
from relay.store import offload_batches as offload
from relay.store.batch_queue import BatchStore
from relay.upstream import Upstream

log = logging.getLogger("relay.batches.offload")
MAX_BACKOFF_S: Final = 600.0
CLAIM: Final = 20  # batches a replica takes per round
READ_GROUP: Final = 1000  # request bodies read back per payload-store call when sending
RUNNING_CANCEL: Final = ("cancelling", "canceling")


class OffloadPoller:
    def __init__(
        self,
        store: BatchStore,
        payloads: PayloadStores,
        snapshot: Callable[[], Snapshot],
        upstream: Upstream,
        *,
        every_s: float,
        budget: BatchBudget | None = None,
    ) -> None:
        self._store = store
        self._payloads = payloads
        self._snapshot = snapshot
        self._upstream = upstream
        self._every_s = every_s
        self._budget = budget
        self._failures: dict[str, int] = {}  # batch id → rounds in a row the provider did not answer
        self._loop = Loop("offload-poll", self._round, every_s=min(every_s, 1.0))

    async def start(self) -> None:
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _round(self) -> None:
        await self.round()

    async def round(self) -> int:
        """One round: every batch due now, moved one step; returns how many were claimed."""
        due = await offload.due_for_poll(
            self._store.engine, every_s=self._every_s, now=datetime.now(UTC), limit=CLAIM
        )
        for batch in due:
            try:
                await self._step(batch)
                self._failures.pop(batch.id, None)
            except Exception as exc:  # an outage, garbage, a bug: never stuck, retried later
                await self._back_off(batch.id, exc)
        return len(due)

    async def _back_off(self, batch_id: str, exc: Exception) -> None:
        n = self._failures[batch_id] = self._failures.get(batch_id, 0) + 1
        wait_s = min(self._every_s * 2 ** (n - 1), max(MAX_BACKOFF_S, self._every_s))
        log.warning(
            "offloaded batch %s could not be moved on (%s); next poll in %.1f s",
            batch_id,
            exc if isinstance(exc, ProviderUnavailable) else type(exc).__name__,
            wait_s,
            extra={"event": "offload_poll_failed", "batch_id": batch_id},
        )
        async with self._store.engine.begin() as conn:
            await offload.poll_again_at(
                conn, batch_id, datetime.now(UTC) + timedelta(seconds=wait_s), self._every_s
            )

    async def _step(self, batch: offload.OffloadedBatch) -> None:
        record = await self._store.batch_record(batch.id)
        if record is None or record.completed_at is not None:
            return
        expires_at = record.expires_at
        if expires_at is not None and expires_at.tzinfo is None:
            expires_at = expires_at.replace(tzinfo=UTC)
        expired = expires_at is not None and expires_at <= datetime.now(UTC)
        plan = self._plan(batch)
        if batch.provider_batch_id is None:
            if batch.cancel_requested or expired:
                await self._mapper(record, plan, expired).rest("cancelled", None)
                return
            if plan is None:
                await self._give_back(batch.id, "the binding or host key it was to be sent with is gone")
                return
            await self._send(batch, record, plan)
            return
        if plan is None:
            raise ProviderUnavailable("the binding or host key it was sent with is gone")
        api = self._api(plan)
        polled = await api.poll(batch.provider_batch_id)
        if polled.ending is None:
            if (batch.cancel_requested or expired) and polled.state not in RUNNING_CANCEL:
                polled = await api.cancel(batch.provider_batch_id)
            await self._set_state(batch.id, polled.state)
            if polled.ending is None:
                return
        mapper = self._mapper(record, plan, expired)
        await mapper.lines(api.results(polled))
        await mapper.rest(polled.ending, polled.failure)
        await self._set_state(batch.id, polled.state)
        log.info(
            "offloaded batch %s ended %s at the provider: %d items mapped",
            batch.id,
            polled.ending,
            mapper.mapped,
            extra={"event": "offload_mapped", "batch_id": batch.id, "items": mapper.mapped},
        )

    async def _send(self, batch: offload.OffloadedBatch, record: BatchRecord, plan: Plan) -> None:
        native = NATIVE_ENDPOINTS.get(record.inbound_shape)
        if native is None:
            await self._give_back(batch.id, f"item shape {record.inbound_shape} has no provider batch API")
            return
        store = self._payloads.of(record.payload_store)
        lines = []
        for start in range(0, record.total_items, READ_GROUP):  # one read per group of bodies
            idxs = range(start, min(start + READ_GROUP, record.total_items))
            found = await store.read_requests(record.id, idxs)
            for idx in idxs:
                body = orjson.loads(found[idx])
                body["model"] = plan.upstream_model  # the provider knows the binding's upstream name
                # An exact-size copy: orjson's answer keeps its whole write buffer (about 8 KiB for a
                # 1 KiB body), which 50 000 held bodies turn into 400 MiB.
                lines.append((str(idx), memoryview(orjson.dumps(body)).tobytes()))
        try:
            created = await self._api(plan).create(native[1], lines)
        except ProviderRefused as refused:
            await self._give_back(batch.id, refused.reason)
            return
        async with self._store.engine.begin() as conn:
            await offload.mark_offloaded(
                conn,
                batch.id,
                binding_id=plan.binding.id,
                provider_batch_id=created.id,
                state=created.state,
                now=datetime.now(UTC),
            )
        log.info(
            "batch %s sent to the provider's batch API as %s (%d items)",
            batch.id,
            created.id,
            record.total_items,
            extra={"event": "offload_sent", "batch_id": batch.id, "items": record.total_items},
        )

    async def _give_back(self, batch_id: str, reason: str) -> None:
        """SPEC §22: the batch runs on Relay's workers instead, and records why."""
        async with self._store.engine.begin() as conn:
            await offload.run_on_gateway(conn, batch_id, reason)
        log.info(
            "batch %s runs on Relay's workers: %s",
            batch_id,
            reason,
            extra={"event": "offload_refused", "batch_id": batch_id},
        )

    async def _set_state(self, batch_id: str, state: str) -> None:
        async with self._store.engine.begin() as conn:
            await offload.set_provider_state(conn, batch_id, state[:32])

    def _plan(self, batch: offload.OffloadedBatch) -> Plan | None:
        """The binding, its host and model, and the recorded key (None: one of them is gone)."""
        snap = self._snapshot()
        binding = snap.bindings.get(batch.binding_id)
        key = snap.host_keys.get(batch.key_id or "")
        if binding is None or key is None or key.value is None:
            return None
        host, model = snap.hosts.get(binding.host_id), snap.models.get(binding.model_id)
        if host is None or model is None:
            return None
        return Plan(model, binding, host, (key,))

    def _api(self, plan: Plan) -> ProviderBatchAPI:
        key = plan.keys[0].value or ""
        if plan.binding.adapter == "anthropic":
            return AnthropicBatchAPI(self._upstream, plan.host.base_url, key)
        return OpenAIBatchAPI(self._upstream, plan.host.base_url, key)

    def _mapper(self, record: BatchRecord, plan: Plan | None, expired: bool) -> Mapper:
        policy = self._snapshot().policies.get(record.policy_id)
        return Mapper(
            self._store, self._payloads, Mapping(record, plan, policy, self._budget), expired=expired
        )
