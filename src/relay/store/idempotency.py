"""The ``idempotency_keys`` table's SQL (SPEC §10.10): find a live first answer, record one.

What it does. :func:`find_answer` reads the answer stored for ``(owner, key)`` within the window;
:func:`record_answer` writes one inside the caller's transaction (the create's), first removing a row
of the same pair older than the window, so a key can be used again after 24 h; :func:`delete_older`
removes up to ``limit`` rows past the window (a periodic sweep: keys never used again stay otherwise);
:func:`delete_answers_naming` removes an owner's rows whose answer is the create of one batch (SPEC §17: a
deleted batch's idempotency rows go with it, so a repeat cannot answer an id that no longer exists).

What it deliberately does not know. What a fingerprint covers, what an answer is, HTTP.

Invariants. At most one row per ``(owner, key)`` (the primary key): of two concurrent creates with one
key, the second's insert waits for the first's commit and then fails (``IntegrityError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson
from sqlalchemy import delete, insert, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store import tables as t

K = t.idempotency_keys


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    fingerprint: str
    status_code: int
    body: bytes


async def find_answer(
    conn: AsyncConnection, owner: str, key: str, *, newer_than: datetime
) -> StoredAnswer | None:
    row = (
        await conn.execute(
            select(K.c.fingerprint, K.c.status_code, K.c.body).where(
                K.c.owner == owner,
                K.c.key == key,
                K.c.created_at > literal(newer_than, t.UTCDateTime()),
            )
        )
    ).first()
    return None if row is None else StoredAnswer(row.fingerprint, row.status_code, bytes(row.body))


async def lookup(engine: AsyncEngine, owner: str, key: str, *, newer_than: datetime) -> StoredAnswer | None:
    """:func:`find_answer` on a connection of its own (a create's replay, before any transaction)."""
    async with engine.connect() as conn:
        return await find_answer(conn, owner, key, newer_than=newer_than)


async def record_answer(
    conn: AsyncConnection,
    owner: str,
    key: str,
    answer: StoredAnswer,
    *,
    created_at: datetime,
    window: timedelta,
) -> None:
    await conn.execute(
        delete(K).where(
            K.c.owner == owner,
            K.c.key == key,
            K.c.created_at <= literal(created_at - window, t.UTCDateTime()),
        )
    )
    await conn.execute(
        insert(K).values(
            owner=owner,
            key=key,
            fingerprint=answer.fingerprint,
            status_code=answer.status_code,
            body=answer.body,
            created_at=created_at,
        )
    )


async def delete_older(engine: AsyncEngine, cutoff: datetime, limit: int) -> int:
    """Delete up to ``limit`` rows created at or before ``cutoff`` (one bounded statement, its own
    transaction); returns how many went."""
    old = select(K.c.owner, K.c.key).where(K.c.created_at <= literal(cutoff, t.UTCDateTime())).limit(limit)
    async with engine.begin() as conn:
        result = await conn.execute(delete(K).where(tuple_(K.c.owner, K.c.key).in_(old)))
    return int(result.rowcount or 0)


async def delete_answers_naming(engine: AsyncEngine, owner: str, batch_id: str, created_at: datetime) -> int:
    """Delete ``owner``'s rows whose stored answer is the create of ``batch_id`` (its top-level ``id``:
    a retry's answer names its original as ``retry_of`` and is kept); how many went. The create wrote
    its row with the batch's own ``created_at``, so only the owner's rows of that second are read."""
    near = (created_at - timedelta(seconds=1), created_at + timedelta(seconds=1))
    query = select(K.c.key, K.c.body).where(
        K.c.owner == owner,
        K.c.created_at >= literal(near[0], t.UTCDateTime()),
        K.c.created_at <= literal(near[1], t.UTCDateTime()),
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    keys = [key for key, body in rows if _answer_id(bytes(body)) == batch_id]
    if not keys:
        return 0
    async with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        result = await conn.execute(delete(K).where(K.c.owner == owner, K.c.key.in_(keys)))
    return int(result.rowcount or 0)


def _answer_id(body: bytes) -> object:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return answer.get("id") if isinstance(answer, dict) else None
