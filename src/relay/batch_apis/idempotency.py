"""Idempotent batch creates (SPEC §10.10): the ``Idempotency-Key`` header, for every batch API.

What it does. :func:`claim_from` validates the header (1–255 printable ASCII characters, else 400
naming ``Idempotency-Key``) and makes an :class:`IdempotencyClaim` of the owner, the key and a
fingerprint of the route and the request body. A create first calls :func:`replay`: a first answer of
the same owner and key within 24 h is answered again verbatim (same status and body), or, for a
different fingerprint, refused with 409 ``idempotency_key_reused``. Otherwise the façade hands the
claim to the engine's create as its :class:`~relay.batches.new_batch.IdempotencyHook`: the engine runs
:meth:`IdempotencyClaim.writer` (with its answer) inside ``BatchStore.insert_batch``, so the row is
written in the SAME transaction as the batch: a repeat creates nothing, and a concurrent duplicate
fails that transaction (nothing written) and resolves to the first answer with
:meth:`IdempotencyClaim.first_answer` (the engine calls it, never knowing which API asked).

:func:`purge_expired` deletes rows past the window, a bounded batch per call (the expiry sweeper's
loop calls it every pass, ``relay.boot``).

What it deliberately does not know. What the answer of a create is (each API renders its own), how
a batch is written (the engine's; it does not import this module, the contract in pyproject says so).

Invariants. One owner's keys never meet another's (owners as in §10.8). The answer stored is the bytes
sent, so a replay is byte-identical.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from relay.batches.new_batch import Answer
from relay.errors import Conflict, InvalidRequest
from relay.http.spool import SpooledBody
from relay.store import idempotency as store
from relay.store.engine import Connection, Engine
from relay.store.idempotency import StoredAnswer

HEADER: Final = "idempotency-key"
WINDOW: Final = timedelta(hours=24)
MAX_KEY: Final = 255
PURGE_ROWS: Final = 1_000  # idempotency rows deleted per sweep pass


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__(
            "Idempotency-Key was already used with a different request (route or body) by this caller"
        )


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    owner: str
    key: str
    fingerprint: str

    def writer(self, answer: Answer, created_at: datetime) -> Callable[[Connection], Awaitable[None]]:
        """What ``BatchStore.insert_batch(first=…)`` runs: records ``answer`` in the create's transaction."""

        async def write(conn: Connection) -> None:
            stored = StoredAnswer(self.fingerprint, answer.status_code, answer.body)
            await store.record_answer(
                conn, self.owner, self.key, stored, created_at=created_at, window=WINDOW
            )

        return write

    async def first_answer(self, engine: Engine) -> Answer | None:
        """The answer of the create that used this key first (:func:`replay`)."""
        return await replay(engine, self)


def validate_key(value: str | None) -> str | None:
    """The header's key, None without the header; 400 for an empty, too long or non-printable one."""
    if value is None:
        return None
    if not value:
        raise InvalidRequest("Idempotency-Key must not be empty (1-255 printable ASCII characters)")
    if len(value) > MAX_KEY:
        raise InvalidRequest(f"Idempotency-Key is longer than {MAX_KEY} characters")
    if not all(" " <= ch <= "~" for ch in value):
        raise InvalidRequest("Idempotency-Key must be printable ASCII")
    return value


def claim_from(header: str | None, owner: str, route: str, body: bytes) -> IdempotencyClaim | None:
    """The claim of a create carrying ``Idempotency-Key: header`` (None without one)."""
    key = validate_key(header)
    if key is None:
        return None
    digest = hashlib.sha256()
    digest.update(route.encode())
    digest.update(b"\0")
    digest.update(body)
    return IdempotencyClaim(owner, key, digest.hexdigest())


async def claim_from_spool(
    header: str | None, owner: str, route: str, body: SpooledBody
) -> IdempotencyClaim | None:
    """:func:`claim_from` of a spooled body: the same fingerprint, the file hashed in a thread."""
    key = validate_key(header)
    if key is None:
        return None
    return IdempotencyClaim(owner, key, await asyncio.to_thread(body.sha256, route.encode() + b"\0"))


async def replay(engine: Engine, claim: IdempotencyClaim) -> Answer | None:
    """The first answer to repeat (None: go on and create); :class:`IdempotencyKeyReused` when the
    key was used with a different request."""
    found = await store.lookup(engine, claim.owner, claim.key, newer_than=datetime.now(UTC) - WINDOW)
    if found is None:
        return None
    if found.fingerprint != claim.fingerprint:
        raise IdempotencyKeyReused()
    return Answer(found.status_code, found.body)


async def purge_expired(engine: Engine, limit: int = PURGE_ROWS) -> int:
    """Delete up to ``limit`` idempotency rows older than the 24 h window (they can never answer
    again); returns how many went."""
    return await store.delete_older(engine, datetime.now(UTC) - WINDOW, limit)
