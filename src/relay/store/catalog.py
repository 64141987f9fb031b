"""SQL for the catalog: rows in, rows out, inside a transaction the caller owns.

The repository is generic over the catalog tables of ``tables.py`` because every kind has the same
life (insert, read by name or id, update, delete, child rows replaced as a whole). It does not know
about validation, secrets or wire shapes: services hand it finished rows. Integrity failures come back
as :class:`relay.errors.Conflict` with a message naming the column or the referencing kinds, so the
database stays the final judge of uniqueness and references even under concurrent writers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, delete, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.errors import Conflict
from relay.store import tables as t
from relay.store.engine import classify_integrity_error

Row = dict[str, Any]
CATALOG_CHANNEL = "relay_catalog"
REFERRER_NAMES = {
    "policy_host_keys": "policy pools",
    "policy_guardrails": "policies",
    "user_memberships": "user memberships",
    "relay_keys": "keys",
    "host_keys": "host keys",
    "service_accounts": "service accounts",
    "webhooks": "webhooks",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def _as_dict(row: Any) -> Row:
    return dict(row._mapping)


async def resolve_ref(conn: AsyncConnection, table: Table, ref: str) -> str | None:
    """The id of the object named or identified by ``ref``, or None."""
    result = await conn.execute(
        select(table.c.id).where(or_(table.c.id == ref, table.c.name == ref)).order_by(table.c.id != ref)
    )
    return result.scalar()


async def get(conn: AsyncConnection, table: Table, object_id: str) -> Row | None:
    row = (await conn.execute(select(table).where(table.c.id == object_id))).first()
    return _as_dict(row) if row else None


async def list_rows(conn: AsyncConnection, table: Table) -> list[Row]:
    result = await conn.execute(select(table).order_by(table.c.created_at, table.c.id))
    return [_as_dict(r) for r in result]


async def names(conn: AsyncConnection, table: Table, ids: Iterable[str] | None = None) -> dict[str, str]:
    query = select(table.c.id, table.c.name)
    if ids is not None:
        wanted = list({i for i in ids if i})
        if not wanted:
            return {}
        query = query.where(table.c.id.in_(wanted))
    return {r.id: r.name for r in await conn.execute(query)}


async def insert_row(conn: AsyncConnection, table: Table, row: Mapping[str, Any], *, kind: str) -> None:
    try:
        async with conn.begin_nested():
            await conn.execute(insert(table).values(**row))
    except IntegrityError as exc:
        raise _conflict(exc, kind) from None


async def update_row(
    conn: AsyncConnection, table: Table, object_id: str, values: Mapping[str, Any], *, kind: str
) -> None:
    try:
        async with conn.begin_nested():
            await conn.execute(update(table).where(table.c.id == object_id).values(**values))
    except IntegrityError as exc:
        raise _conflict(exc, kind) from None


async def delete_row(conn: AsyncConnection, table: Table, object_id: str, *, kind: str, name: str) -> None:
    """Delete, or refuse with 409 naming what still references the object."""
    referrers = await referencing_kinds(conn, table, object_id)
    if referrers:
        raise Conflict(f"{kind} {name!r} is still referenced by {', '.join(referrers)}")
    try:
        async with conn.begin_nested():
            await conn.execute(delete(table).where(table.c.id == object_id))
    except IntegrityError:
        raise Conflict(f"{kind} {name!r} is still referenced") from None


async def referencing_kinds(conn: AsyncConnection, table: Table, object_id: str) -> list[str]:
    """``"2 projects"``-style phrases for every RESTRICT reference to the object (CASCADE ones are
    parts of their parent and vanish with it)."""
    found: list[str] = []
    for other in t.metadata.sorted_tables:
        for fk in other.foreign_keys:
            if fk.column.table is not table or (fk.ondelete or "").upper() == "CASCADE":
                continue
            count = (
                await conn.execute(select(func.count()).select_from(other).where(fk.parent == object_id))
            ).scalar_one()
            if count:
                found.append(f"{REFERRER_NAMES.get(other.name, other.name)} ({count})")
    return found


async def children(
    conn: AsyncConnection, table: Table, parent_col: str, parent_ids: Sequence[str]
) -> list[Row]:
    if not parent_ids:
        return []
    query = select(table).where(table.c[parent_col].in_(list(parent_ids))).order_by(table.c.position)
    return [_as_dict(r) for r in await conn.execute(query)]


async def replace_children(
    conn: AsyncConnection,
    table: Table,
    parent_col: str,
    parent_id: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    kind: str,
) -> None:
    """Child rows (aliases, pool entries, memberships) are owned by their parent and replaced whole."""
    await conn.execute(delete(table).where(table.c[parent_col] == parent_id))
    if rows:
        try:
            async with conn.begin_nested():
                await conn.execute(insert(table), [dict(r) for r in rows])
        except IntegrityError as exc:
            raise _conflict(exc, kind) from None


async def model_name_clash(
    conn: AsyncConnection, model_id: str, name: str, aliases: Sequence[str]
) -> str | None:
    """A name or alias of this model that another model uses as alias or name, if any."""
    as_alias = await conn.execute(
        select(t.model_aliases.c.alias).where(
            t.model_aliases.c.alias == name, t.model_aliases.c.model_id != model_id
        )
    )
    clash = as_alias.scalar()
    if clash is None and aliases:
        as_name = await conn.execute(
            select(t.models.c.name).where(t.models.c.name.in_(list(aliases)), t.models.c.id != model_id)
        )
        clash = as_name.scalar()
    return clash


async def model_ids_by_name(conn: AsyncConnection, names: Iterable[str]) -> dict[str, str]:
    """``{name or alias: model id}`` for those of ``names`` that name a model."""
    wanted = list(set(names))
    if not wanted:
        return {}
    by_name = await conn.execute(select(t.models.c.name, t.models.c.id).where(t.models.c.name.in_(wanted)))
    found = {r.name: r.id for r in by_name}
    by_alias = await conn.execute(
        select(t.model_aliases.c.alias, t.model_aliases.c.model_id).where(t.model_aliases.c.alias.in_(wanted))
    )
    for r in by_alias:
        found.setdefault(r.alias, r.model_id)
    return found


async def bump_revision(conn: AsyncConnection) -> int:
    """Advance the catalog revision inside the caller's write transaction; returns the new value."""
    await conn.execute(
        update(t.catalog_revision)
        .where(t.catalog_revision.c.id == 1)
        .values(revision=t.catalog_revision.c.revision + 1, updated_at=utcnow())
    )
    if conn.dialect.name == "postgresql":
        # Delivered by Postgres at commit, and only if the transaction commits.
        await conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CATALOG_CHANNEL})
    return await read_revision(conn)


async def read_revision(conn: AsyncConnection) -> int:
    result = await conn.execute(select(t.catalog_revision.c.revision).where(t.catalog_revision.c.id == 1))
    return int(result.scalar_one())


async def load_catalog(conn: AsyncConnection) -> dict[str, list[Row]]:
    """Every catalog table, whole, for building a snapshot (the catalog is small: thousands of rows)."""
    out: dict[str, list[Row]] = {}
    for table in t.CATALOG_TABLES:
        out[table.name] = [_as_dict(r) for r in await conn.execute(select(table))]
    keys = select(t.signing_keys.c.id, t.signing_keys.c.public_key, t.signing_keys.c.active)
    out["signing_keys"] = [_as_dict(r) for r in await conn.execute(keys)]
    revoked = select(t.inference_tokens.c.jti, t.inference_tokens.c.expires_at).where(
        t.inference_tokens.c.revoked_at.is_not(None), t.inference_tokens.c.expires_at > utcnow()
    )
    out["revoked_tokens"] = [_as_dict(r) for r in await conn.execute(revoked)]
    return out


def _conflict(exc: IntegrityError, kind: str) -> Conflict:
    problem = classify_integrity_error(exc)
    if problem.kind == "unique":
        field = problem.detail or "name"
        return Conflict(f"a {kind} with this {field} already exists")
    if problem.kind == "foreign_key":
        return Conflict(f"{kind} refers to an object that no longer exists")
    return Conflict(f"{kind} violates a database constraint ({problem.kind} {problem.detail})".strip())
