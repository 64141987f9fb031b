"""The webhook outbox (SPEC §10.10): the events a finished batch owes, written in ITS transaction.

What it does. :func:`enqueue` is called by whatever finishes a batch, with the connection of the
transaction that finishes it (the §10 engine through a finish hook registered at boot; the §14/§15
façades with their own ``api`` and event type). It writes one pending event per enabled webhook whose
project matches (or that has none) and whose ``events`` include this type, each with its own ``evt_…``
id and the exact body every attempt will send. The deliverer (``relay.webhooks.deliverer``) sends them
after commit; a rolled-back finish leaves no event behind.

What it deliberately does not know. Batches: it takes ids, counts and a type, never a batch row, and
the batch engine never imports it. HTTP and signing.

Invariants. At most one event per webhook and batch (the database's unique index), however often a
batch is reported finished. The body carries ids and counts only, never a credential or an item body.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.ids import mint_id
from relay.domain.kind_specs import WEBHOOK_EVENTS
from relay.store import webhooks as store

APIS: Final = ("relay", "openai", "anthropic")
TEST_EVENT: Final = "webhook.test"  # sent on an operator's request, whatever the webhook's ``events``


class Finished(Protocol):
    """What the batch engine's finish hook reports of a batch (``relay.batches.hooks.FinishedBatch``,
    described here so this package does not import the engine)."""

    @property
    def id(self) -> str: ...
    @property
    def api(self) -> str: ...
    @property
    def project_id(self) -> str: ...
    @property
    def counts(self) -> Mapping[str, int]: ...
    @property
    def cancelled(self) -> bool: ...
    @property
    def expired(self) -> bool: ...


def relay_event_type(*, cancelled: bool, expired: bool = False, failed: bool = False) -> str:
    """The event a finished batch sends: a §10 batch ``batch.cancelled`` after a cancel, else
    ``batch.completed`` (whatever its item states); ``expired``/``failed`` are §14/§15 end states."""
    if cancelled:
        return "batch.cancelled"
    if expired:
        return "batch.expired"
    if failed:
        return "batch.failed"
    return "batch.completed"


def event_body(event_id: str, event_type: str, created_at: int, data: Mapping[str, object]) -> str:
    return orjson.dumps({"id": event_id, "type": event_type, "created_at": created_at, "data": data}).decode()


async def enqueue(
    conn: AsyncConnection,
    *,
    batch_id: str,
    api: str,
    project_id: str,
    counts: Mapping[str, int],
    event_type: str,
) -> int:
    """Write the events of a batch that finishes in ``conn``'s transaction; returns how many."""
    if event_type not in WEBHOOK_EVENTS:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    if api not in APIS:
        raise ValueError(f"unknown batch api {api!r}")
    targets = [w for w in await store.matching_webhooks(conn, project_id) if event_type in w["events"]]
    if not targets:
        return 0
    created_at = int(time.time())
    data = {"id": batch_id, "api": api, "project_id": project_id, "counts": dict(counts)}
    rows = []
    for webhook in targets:
        event_id = mint_id("evt")
        rows.append(
            {
                "id": event_id,
                "webhook_id": webhook["id"],
                "type": event_type,
                "batch_id": batch_id,
                "body": event_body(event_id, event_type, created_at, data),
            }
        )
    return await store.insert_events(conn, rows)


async def enqueue_test(conn: AsyncConnection, webhook_id: str, name: str) -> str:
    """One test event for one webhook, in ``conn``'s transaction; returns its id. It goes through the
    same outbox as a batch's, so it is signed, retried and listed among the deliveries exactly as a
    real one. Its own id stands in for the batch id: the one-event-per-batch index never refuses it."""
    event_id = mint_id("evt")
    data = {"webhook_id": webhook_id, "webhook": name}
    body = event_body(event_id, TEST_EVENT, int(time.time()), data)
    row = {"id": event_id, "webhook_id": webhook_id, "type": TEST_EVENT, "batch_id": event_id, "body": body}
    await store.insert_events(conn, [row])
    return event_id


async def finish_hook(conn: AsyncConnection, finished: Sequence[Finished]) -> None:
    """The batch engine's finish hook (registered by ``relay.boot``): the events of the §10 and §15
    batches that ``conn``'s transaction finishes. A §14 batch is not done when its last item is: its
    façade writes the output and error files first and enqueues its event in the transaction that
    gives the batch its end state (``completed``, ``cancelled``, ``expired`` or ``failed``)."""
    for batch in finished:
        if batch.api == "openai":
            continue
        await enqueue(
            conn,
            batch_id=batch.id,
            api=batch.api,
            project_id=batch.project_id,
            counts=batch.counts,
            event_type=relay_event_type(cancelled=batch.cancelled, expired=batch.expired),
        )
