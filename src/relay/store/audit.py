"""SQL for the audit log (SPEC §21): append entries to the chain, read pages and the whole chain.

What it does. :func:`append` adds entries at the head of the one chain inside the caller's
transaction: it takes the chain lock (Postgres: a transaction-level advisory lock, held to commit or
rollback; SQLite: the caller's ``BEGIN IMMEDIATE`` already makes it the only writer), reads the head,
and inserts each entry with ``seq`` = head + 1 and its ``prev_hash``/``hash``. So concurrent writers on
any number of replicas form one chain, and an entry exists exactly when the change it records
committed. :func:`page` and :func:`in_order` read entries back exactly as the API shows them.

What it deliberately does not know: who the actor is, what changed, or redaction (``control.audit``
builds finished entries); what the hash is (``domain.audit``).

Invariants. No statement here updates or deletes a row. Callers append last in their transaction
(after their own writes), so the chain lock is held only for the insert and the commit, and is never
taken before a row lock another writer could be holding while it waits for the chain.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.audit import GENESIS, canonical, entry_hash
from relay.domain.times import rfc3339
from relay.store.audit_tables import audit_entries as A

# The bytes "relayaud" as a signed bigint: the advisory lock every appender takes on Postgres.
_CHAIN_LOCK_KEY = int.from_bytes(b"relayaud", "big") - (1 << 63)
_CURSOR_TAG = "audit"


@dataclass(frozen=True, slots=True)
class AuditFilter:
    actor: str | None = None
    kind: str | None = None
    action: str | None = None
    start: datetime | None = None
    end: datetime | None = None


async def append(conn: AsyncConnection, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chain and insert ``entries`` (each as the API shows it, without ``prev_hash``/``hash``) in
    order; the entries as stored, hashes included."""
    if not entries:
        return []
    if conn.dialect.name == "postgresql":
        await conn.execute(select(func.pg_advisory_xact_lock(_CHAIN_LOCK_KEY)))
    head = (await conn.execute(select(A.c.seq, A.c.hash).order_by(A.c.seq.desc()).limit(1))).first()
    seq, prev = (int(head.seq), str(head.hash)) if head else (0, GENESIS)
    stored = []
    rows = []
    for entry in entries:
        seq += 1
        chained = {**entry, "prev_hash": prev}
        chained["hash"] = prev = entry_hash(chained)
        stored.append(chained)
        rows.append(_row(seq, chained))
    await conn.execute(insert(A), rows)
    return stored


async def page(
    conn: AsyncConnection, where: AuditFilter, *, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first: up to ``limit`` entries after ``cursor``, and the cursor of the next page."""
    query = select(A).order_by(A.c.seq.desc()).limit(limit + 1)
    if cursor is not None:
        query = query.where(A.c.seq < decode_cursor(cursor))
    if where.actor is not None:
        query = query.where(
            or_(A.c.actor_kind == where.actor, A.c.actor_id == where.actor, A.c.actor_email == where.actor)
        )
    if where.kind is not None:
        query = query.where(A.c.kind == where.kind)
    if where.action is not None:
        query = query.where(A.c.action == where.action)
    if where.start is not None:
        query = query.where(A.c.at >= where.start)
    if where.end is not None:
        query = query.where(A.c.at <= where.end)
    rows = list(await conn.execute(query))
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(int(rows[-1].seq)) if more and rows else None
    return [shown(dict(r._mapping)) for r in rows], next_cursor


async def in_order(conn: AsyncConnection, *, after_seq: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
    """Oldest first, ``(seq, entry)`` for up to ``limit`` entries past ``after_seq``."""
    query = select(A).where(A.c.seq > after_seq).order_by(A.c.seq).limit(limit)
    return [(int(r.seq), shown(dict(r._mapping))) for r in await conn.execute(query)]


def shown(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as ``GET /api/audit`` shows it (and as its hash covers it)."""
    actor: dict[str, Any] = {"kind": row["actor_kind"]}
    if row["actor_id"] is not None:
        actor["id"] = row["actor_id"]
    if row["actor_email"] is not None:
        actor["email"] = row["actor_email"]
    entry: dict[str, Any] = {
        "id": row["id"],
        "at": rfc3339(row["at"]),
        "actor": actor,
        "action": row["action"],
        "kind": row["kind"],
        "ref": row["ref"],
        "ip": row["ip"],
        "user_agent": row["user_agent"],
        "request_id": row["request_id"],
        "prev_hash": row["prev_hash"],
        "hash": row["hash"],
    }
    for side in ("before", "after"):
        if row[side] is not None:
            entry[side] = json.loads(row[side])
    return entry


def _row(seq: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    actor = entry["actor"]
    return {
        "seq": seq,
        "id": entry["id"],
        "at": datetime.fromisoformat(entry["at"]),
        "actor_kind": actor["kind"],
        "actor_id": actor.get("id"),
        "actor_email": actor.get("email"),
        "action": entry["action"],
        "kind": entry["kind"],
        "ref": entry["ref"],
        "before": canonical(entry["before"]) if "before" in entry else None,
        "after": canonical(entry["after"]) if "after" in entry else None,
        "ip": entry["ip"],
        "user_agent": entry["user_agent"],
        "request_id": entry["request_id"],
        "prev_hash": entry["prev_hash"],
        "hash": entry["hash"],
    }


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_TAG}|{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The ``seq`` inside a cursor; ValueError for anything this module did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, seq = raw.split("|", 1)
        if tag != _CURSOR_TAG or not (seq.isascii() and seq.isdigit()):
            raise ValueError
        return int(seq)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("not a cursor this API returned") from None
