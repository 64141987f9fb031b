"""Who a verified single sign-on identity is in Relay (SPEC §21): the user with that email, created
just in time on a first sign-in, with the memberships its groups grant, and a §3.2 session.

One transaction per sign-in: the user's creation or membership change (each audited with the actor
``{kind: "oidc", id, email}``), the session and the sign-in entry commit together or not at all. A
refusal (a disabled user) appends a failed sign-in entry and writes nothing else.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.context import Actor
from relay.control.audit.views import audit_view
from relay.control.kinds import USER
from relay.control.services.catalog import CatalogService
from relay.control.services.tokens import SESSION_TTL, session_digest
from relay.errors import Conflict, Forbidden
from relay.oidc_settings import GroupGrant, desired_memberships, merged_memberships
from relay.store import catalog as store
from relay.store import credentials as creds
from relay.store import tables as t
from relay.store.catalog import utcnow


@dataclass(frozen=True)
class SignedIn:
    session: str
    user_id: str
    email: str


class SsoAccounts:
    def __init__(self, engine: AsyncEngine, catalog: CatalogService) -> None:
        self._engine = engine
        self._catalog = catalog

    async def sign_in(self, email: str, groups: Iterable[str], grants: Iterable[GroupGrant]) -> SignedIn:
        """Sign ``email`` in: find or create the user, set the mapped memberships, open a session.
        Raises Forbidden (``user_disabled``) for a user disabled in Relay."""
        email = email.strip()
        try:
            return await self._sign_in_once(email, groups, grants)
        except Conflict:
            # Two first sign-ins of one person at the same moment: the other created the user (or took
            # the name) first; signing in again finds it.
            return await self._sign_in_once(email, groups, grants)

    async def _sign_in_once(
        self, email: str, groups: Iterable[str], grants: Iterable[GroupGrant]
    ) -> SignedIn:
        grants = list(grants)
        # Reads then writes: on SQLite the write lock is taken up front, so a concurrent sign-in waits
        # for it (busy timeout) instead of failing to upgrade a read snapshot another writer outdated.
        async with self._engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
            grants = [g for g in grants if await self._exists(conn, g)]
            managed, wanted = desired_memberships(grants, groups)
            user = await creds.user_by_email(conn, email)
            if user is None:
                user_id = await self._create(conn, email, wanted)
            elif not user["enabled"]:
                user_id = ""
            else:
                user_id = user["id"]
                await self._sync(conn, user_id, email, managed, wanted)
            if user_id:
                session = secrets.token_urlsafe(32)
                now = utcnow()
                await creds.insert_session(
                    conn,
                    {
                        "session_hash": session_digest(session),
                        "user_id": user_id,
                        "created_at": now,
                        "expires_at": now + SESSION_TTL,
                    },
                )
                await self._catalog.audit.oidc_sign_in(conn, user_id, email)
        if not user_id:
            await self._catalog.audit.sign_in_failed(email, via="oidc", reason="user disabled")
            raise Forbidden("this user is disabled in Relay", code="user_disabled")
        await self._catalog.announce()
        return SignedIn(session, user_id, email)

    async def _exists(self, conn: AsyncConnection, grant: GroupGrant) -> bool:
        """A grant naming a project (or policy) that does not exist is ignored, not a failed sign-in."""
        if await store.resolve_ref(conn, t.projects, grant.project) is None:
            return False
        return grant.policy is None or await store.resolve_ref(conn, t.policies, grant.policy) is not None

    async def _create(self, conn: AsyncConnection, email: str, wanted: dict[str, str | None]) -> str:
        memberships = [{"project": p, "policy": policy} for p, policy in wanted.items()]
        name = await self._free_name(conn, email)
        spec = self._catalog.validate(USER, {"name": name, "email": email, "memberships": memberships})
        user_id = await self._catalog.create_in(conn, USER, spec)
        await store.bump_revision(conn)
        after = await audit_view(self._catalog, conn, USER, user_id)
        await self._catalog.audit.record(
            conn, "create", USER.name, user_id, after=after, actor=Actor("oidc", user_id, email)
        )
        return user_id

    async def _sync(
        self,
        conn: AsyncConnection,
        user_id: str,
        email: str,
        managed: set[str],
        wanted: dict[str, str | None],
    ) -> None:
        before = await audit_view(self._catalog, conn, USER, user_id)
        current = await self._catalog.spec_of(conn, USER, user_id)
        memberships = merged_memberships(current["memberships"], managed, wanted)
        if _same(current["memberships"], memberships):
            return
        spec = self._catalog.validate(USER, {**current, "memberships": memberships})
        await self._catalog.update_in(conn, USER, user_id, spec, given={"memberships"})
        await store.bump_revision(conn)
        after = await audit_view(self._catalog, conn, USER, user_id)
        await self._catalog.audit.record(
            conn,
            "update",
            USER.name,
            user_id,
            before=before,
            after=after,
            actor=Actor("oidc", user_id, email),
        )

    async def _free_name(self, conn: AsyncConnection, email: str) -> str:
        """A user name from the email's local part (names are ``[a-z0-9-]``), made unique."""
        base = re.sub(r"[^a-z0-9-]+", "-", email.split("@")[0].lower()).strip("-")[:48] or "user"
        name = base
        while await store.resolve_ref(conn, t.users, name) is not None:
            name = f"{base}-{secrets.token_hex(3)}"
        return name


def _same(a: list[dict[str, str | None]], b: list[dict[str, str | None]]) -> bool:
    def key(items: list[dict[str, str | None]]) -> set[tuple[str | None, str | None]]:
        return {(m["project"], m.get("policy")) for m in items}

    return key(a) == key(b)
