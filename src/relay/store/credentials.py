"""SQL for credentials: token signing keys, minted tokens, login sessions, relay-key state changes.

Relay-key rows are ordinary catalog rows (``store.catalog`` inserts and reads them); this module adds
the statements that only credentials need. Nothing here hashes, signs or decides: services do.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t
from relay.store.catalog import Row, utcnow

# Key of the Postgres advisory lock under which a replica creates the first signing key: the bytes
# "relaysig" as a bigint.
_SIGNING_LOCK_KEY = int.from_bytes(b"relaysig", "big") - (1 << 63)


async def lock_signing_keys(conn: AsyncConnection) -> None:
    """Serialise "read the signing keys, create the first if none" across replicas booting together,
    so they do not each create one. SQLite: the caller's transaction is BEGIN IMMEDIATE already."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(func.pg_advisory_xact_lock(_SIGNING_LOCK_KEY)))


async def signing_keys(conn: AsyncConnection) -> list[Row]:
    result = await conn.execute(select(t.signing_keys).order_by(t.signing_keys.c.created_at))
    return [dict(r._mapping) for r in result]


async def insert_signing_key(conn: AsyncConnection, row: Mapping[str, Any]) -> None:
    await conn.execute(insert(t.signing_keys).values(**row))


async def insert_token(conn: AsyncConnection, row: Mapping[str, Any]) -> None:
    await conn.execute(insert(t.inference_tokens).values(**row))


async def get_token(conn: AsyncConnection, jti: str) -> Row | None:
    row = (await conn.execute(select(t.inference_tokens).where(t.inference_tokens.c.jti == jti))).first()
    return dict(row._mapping) if row else None


async def revoke_token(conn: AsyncConnection, jti: str, at: datetime) -> None:
    await conn.execute(
        update(t.inference_tokens)
        .where(t.inference_tokens.c.jti == jti, t.inference_tokens.c.revoked_at.is_(None))
        .values(revoked_at=at)
    )


async def revoked_tokens(conn: AsyncConnection, now: datetime) -> dict[str, datetime]:
    """The denylist: revoked tokens that have not expired yet (jti → expiry)."""
    query = select(t.inference_tokens.c.jti, t.inference_tokens.c.expires_at).where(
        t.inference_tokens.c.revoked_at.is_not(None), t.inference_tokens.c.expires_at > now
    )
    return {r.jti: r.expires_at for r in await conn.execute(query)}


async def purge_expired(conn: AsyncConnection, now: datetime) -> None:
    """Expired tokens and sessions can never authenticate again; keep the tables small."""
    await conn.execute(delete(t.inference_tokens).where(t.inference_tokens.c.expires_at <= now))
    await conn.execute(delete(t.user_sessions).where(t.user_sessions.c.expires_at <= now))


async def bump_token_version(conn: AsyncConnection, user_id: str) -> None:
    await conn.execute(
        update(t.users)
        .where(t.users.c.id == user_id)
        .values(token_version=t.users.c.token_version + 1, updated_at=utcnow())
    )


async def user_by_email(conn: AsyncConnection, email: str) -> Row | None:
    row = (await conn.execute(select(t.users).where(t.users.c.email == email))).first()
    return dict(row._mapping) if row else None


async def insert_session(conn: AsyncConnection, row: Mapping[str, Any]) -> None:
    await conn.execute(insert(t.user_sessions).values(**row))


async def session_user(conn: AsyncConnection, session_hash: str, now: datetime) -> str | None:
    query = select(t.user_sessions.c.user_id).where(
        t.user_sessions.c.session_hash == session_hash, t.user_sessions.c.expires_at > now
    )
    return (await conn.execute(query)).scalar()


async def membership(conn: AsyncConnection, user_id: str, project_id: str) -> bool:
    query = select(t.user_memberships.c.user_id).where(
        t.user_memberships.c.user_id == user_id, t.user_memberships.c.project_id == project_id
    )
    return (await conn.execute(query)).first() is not None


async def key_by_hash(conn: AsyncConnection, key_hash: str) -> Row | None:
    row = (await conn.execute(select(t.relay_keys).where(t.relay_keys.c.key_hash == key_hash))).first()
    return dict(row._mapping) if row else None


async def user_projects(conn: AsyncConnection, user_id: str) -> list[tuple[str, str]]:
    """``[(project id, project name)]`` the user is a member of, by name."""
    m, p = t.user_memberships, t.projects
    query = (
        select(p.c.id, p.c.name)
        .join(m, m.c.project_id == p.c.id)
        .where(m.c.user_id == user_id)
        .order_by(p.c.name)
    )
    return [(str(i), str(n)) for i, n in await conn.execute(query)]


async def delete_session(conn: AsyncConnection, session_hash: str) -> None:
    await conn.execute(delete(t.user_sessions).where(t.user_sessions.c.session_hash == session_hash))
