"""Building audit entries and appending them in the transaction of the change they record (SPEC §21).

What it does. A service that changes something calls :meth:`AuditLog.entry` for each change (the
action, the kind, the ref, the object before and after as the API renders it, with the write-only
fields named so they show as ``"<redacted>"``) and, as its transaction's last statement,
:meth:`AuditLog.append`: the entries commit or roll back with the change, so a refused write leaves
none and no change is left without its entry. Sign-ins and failed sign-ins are entries too
(:meth:`sign_in`, :meth:`sign_in_failed`, and :meth:`oidc_sign_in` for single sign-on).

What it deliberately does not know: SQL and the chain (``store.audit``), HTTP (the request context
comes from ``control.audit.context``).

Invariants. An entry never holds a secret: before/after are rendered objects (which never carry a
password hash, sealed value or key hash) with every write-only field masked; a failed sign-in records
the email tried, never the password.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.context import Actor, current
from relay.domain.audit import redacted
from relay.domain.ids import mint_id
from relay.domain.times import rfc3339
from relay.store import audit as store
from relay.store.catalog import utcnow

Entry = dict[str, Any]


class AuditLog:
    def __init__(self, engine: AsyncEngine | None = None) -> None:
        self._engine = engine

    def entry(
        self,
        action: str,
        kind: str,
        ref: str,
        *,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
        write_only: Iterable[str] = (),
        actor: Actor | None = None,
    ) -> Entry:
        """One entry as the API will show it (``id``, ``at`` minted now), before it is chained."""
        context = current()
        fields = tuple(write_only)
        out: Entry = {
            "id": mint_id("aud"),
            "at": rfc3339(utcnow()),
            "actor": (actor or context.actor).as_json(),
            "action": action,
            "kind": kind,
            "ref": str(ref)[:320],
            "ip": context.ip,
            "user_agent": context.user_agent,
            "request_id": context.request_id,
        }
        shown_before, shown_after = redacted(before, fields), redacted(after, fields)
        if shown_before is not None:
            out["before"] = shown_before
        if shown_after is not None:
            out["after"] = shown_after
        return out

    async def append(self, conn: AsyncConnection, entries: Sequence[Entry]) -> list[Entry]:
        """Chain ``entries`` into the log inside ``conn``'s transaction: call it last, just before commit."""
        return await store.append(conn, entries)

    async def record(self, conn: AsyncConnection, action: str, kind: str, ref: str, **details: Any) -> None:
        """One entry, appended now: for a transaction that records a single change."""
        await self.append(conn, [self.entry(action, kind, ref, **details)])

    # -- sign-ins -----------------------------------------------------------------------------------

    async def sign_in(self, conn: AsyncConnection, actor: Actor, ref: str) -> None:
        """A successful sign-in, in the transaction that stores its session."""
        await self.record(conn, "sign_in", "Session", ref, actor=actor)

    async def oidc_sign_in(self, conn: AsyncConnection, user_id: str, email: str) -> None:
        """A single sign-on (OIDC) sign-in of ``user_id``, in the transaction that stores its session
        and memberships: the actor is ``{kind: "oidc", id, email}``."""
        await self.sign_in(conn, Actor("oidc", user_id, email), user_id)

    async def sign_in_failed(self, tried: str, *, via: str = "user", reason: str | None = None) -> None:
        """A refused sign-in: ``ref`` is the email tried (``admin_token`` for the admin token's failed
        dashboard sign-ins); ``via`` is the actor kind that was claimed; the reason goes in ``after``
        (``{"reason": …}``). Never a password or token."""
        email = tried if via != "admin_token" and tried else None
        after = {"reason": reason} if reason else None
        await self.record_alone(
            "sign_in_failed", "Session", tried, after=after, actor=Actor(via, email=email)
        )

    async def record_alone(self, action: str, kind: str, ref: str, **details: Any) -> None:
        """One entry in a transaction of its own, for an event that changes nothing else (a failed
        sign-in; the admin token's dashboard sign-in, whose session is a signed cookie)."""
        assert self._engine is not None, "the control plane builds AuditLog with its engine"
        entry = self.entry(action, kind, ref, **details)
        async with self._engine.begin() as conn:
            await self.append(conn, [entry])
