"""What an audit entry's ``before``/``after`` hold for a catalog object: the object as the control API
renders it, plus each write-only field that holds a value shown as ``"<redacted>"`` (a password that
is set, a stored host-key value, a webhook secret), so an auditor sees that it exists, or changed,
never what it is.

What it deliberately does not know: how objects are rendered (``CatalogService.render_one``) or
stored; it only reads whether the sealed or hashed column is filled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from relay.control.kinds import Kind
from relay.domain.audit import REDACTED
from relay.store import catalog as store

if TYPE_CHECKING:
    from relay.control.services.catalog import CatalogService

# Write-only spec field → the column that holds it transformed (hashed or sealed).
STORED_AS = {"password": "password_hash", "value": "value_encrypted", "secret": "secret_encrypted"}


async def audit_view(
    catalog: CatalogService,
    conn: AsyncConnection,
    kind: Kind,
    object_id: str,
    rendered: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The object for ``before``/``after``; ``rendered`` is its API rendering when the caller has it
    already (the write's own answer), so it is not rendered twice."""
    shown = dict(rendered) if rendered is not None else await catalog.render_one(conn, kind, object_id)
    if kind.write_only:
        row = await store.get(conn, kind.table, object_id) or {}
        for name in kind.write_only:
            if row.get(STORED_AS.get(name, name)) is not None:
                shown[name] = REDACTED
    return shown
