"""Inference tokens and user sessions on the control plane (SPEC §3.2).

Minting: by an admin for any user (``POST /api/users/{id}/tokens``) or by a user for themself through
a login session (``/api/auth/login`` → ``/api/auth/token``). The user must be an enabled member of the
project. Each minted token is recorded (jti, user, project, expiry — never the token) so that
``DELETE /api/tokens/{jti}`` can put it on the denylist until its expiry. Revoking all of a user's tokens
bumps ``token_version``. Revocations are catalog changes: every replica sees them within 2 s.

The signing key is created once (first boot of the first replica), sealed under the master key; every
replica signs with the newest one and verifies with all of them.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.context import Actor
from relay.control.services.catalog import CatalogService
from relay.control.services.validation import validated
from relay.crypto.passwords import hash_password, verify_password
from relay.crypto.sealing import SecretBox
from relay.crypto.tokens import DEFAULT_TTL_S, MAX_TTL_S, TokenSigner, generate_private_key
from relay.domain.ids import mint_id
from relay.domain.times import rfc3339
from relay.errors import Forbidden, NotFound, Unauthenticated
from relay.store import catalog as store
from relay.store import credentials as creds
from relay.store import tables as t
from relay.store.catalog import utcnow

SESSION_TTL = timedelta(hours=12)


class MintRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str
    ttl_seconds: int = Field(DEFAULT_TTL_S, ge=1, le=MAX_TTL_S)


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str
    password: str


async def load_signer(engine: AsyncEngine, box: SecretBox) -> TokenSigner:
    """The newest active signing key, creating the first one if there is none yet. A write transaction
    from its first statement (BEGIN IMMEDIATE on SQLite, an advisory lock on Postgres): replicas booting
    together on a new database would otherwise both read "none" and both create one (on SQLite the
    second's read-to-write upgrade fails at once with "database is locked")."""
    async with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        await creds.lock_signing_keys(conn)
        rows = [r for r in await creds.signing_keys(conn) if r["active"]]
        if not rows:
            private, public = generate_private_key()
            key_id = mint_id("sig")
            sealed = box.seal(private.hex(), bound_to=key_id)
            row = {"id": key_id, "private_key_sealed": sealed, "public_key": public, "created_at": utcnow()}
            await creds.insert_signing_key(conn, row)
            await store.bump_revision(conn)
            rows = [row]
    newest = rows[-1]
    try:
        private_hex = box.open(bytes(newest["private_key_sealed"]), bound_to=newest["id"])
    except ValueError:
        raise ValueError(
            "RELAY_MASTER_KEY: does not open the secrets stored in this database "
            "(it was set up with another master key)"
        ) from None
    return TokenSigner(newest["id"], bytes.fromhex(private_hex))


class TokenService:
    def __init__(self, engine: AsyncEngine, catalog: CatalogService) -> None:
        self._engine = engine
        self._catalog = catalog
        self._signer: TokenSigner | None = None
        self._dummy: str | None = None

    async def _dummy_hash(self) -> str:
        if self._dummy is None:
            self._dummy = await hash_password(secrets.token_urlsafe(16))
        return self._dummy

    def attach_signer(self, signer: TokenSigner) -> None:
        """The signing key exists only after migrations ran (boot calls this before serving)."""
        self._signer = signer

    async def mint_for_user(self, user_ref: str, payload: Any) -> dict[str, Any]:
        request: MintRequest = validated(MintRequest, payload)
        async with self._engine.begin() as conn:
            user_id = await store.resolve_ref(conn, t.users, user_ref)
            if user_id is None:
                raise NotFound(f"User {user_ref!r} not found")
            return await self._mint(conn, user_id, request)

    async def login(self, payload: Any) -> str:
        request: LoginRequest = validated(LoginRequest, payload)
        async with self._engine.connect() as conn:
            user = await creds.user_by_email(conn, request.email)
        # Verify outside any transaction (it takes tens of milliseconds), and verify even for an
        # unknown email so the answer time does not reveal which emails exist.
        password_hash = user["password_hash"] if user else None
        ok = await verify_password(password_hash or await self._dummy_hash(), request.password)
        if user is None or not password_hash or not ok:
            await self._catalog.audit.sign_in_failed(request.email, reason="invalid email or password")
            raise Unauthenticated("invalid email or password")
        if not user["enabled"]:
            await self._catalog.audit.sign_in_failed(request.email, reason="user disabled")
            raise Unauthenticated("user disabled")
        session = secrets.token_urlsafe(32)
        now = utcnow()
        async with self._engine.begin() as conn:
            await creds.insert_session(
                conn,
                {
                    "session_hash": session_digest(session),
                    "user_id": user["id"],
                    "created_at": now,
                    "expires_at": now + SESSION_TTL,
                },
            )
            await self._catalog.audit.sign_in(conn, Actor("user", user["id"], user["email"]), user["id"])
        return session

    async def mint_for_session(self, session: str | None, payload: Any) -> dict[str, Any]:
        if not session:
            raise Unauthenticated("missing session (log in at /api/auth/login)")
        request: MintRequest = validated(MintRequest, payload)
        async with self._engine.begin() as conn:
            user_id = await creds.session_user(conn, session_digest(session), utcnow())
            if user_id is None:
                raise Unauthenticated("invalid or expired session")
            return await self._mint(conn, user_id, request)

    async def session_identity(self, session: str) -> dict[str, Any] | None:
        """Who a live session belongs to (the dashboard's sign-in, SPEC §16): ``{"user_id", "email",
        "projects": [(id, name)]}``, or None for an unknown or expired session or a disabled user."""
        async with self._engine.connect() as conn:
            user_id = await creds.session_user(conn, session_digest(session), utcnow())
            if user_id is None:
                return None
            user = await store.get(conn, t.users, user_id)
            if user is None or not user["enabled"]:
                return None
            projects = await creds.user_projects(conn, user_id)
        return {"user_id": user_id, "email": user["email"], "projects": projects}

    async def end_session(self, session: str) -> None:
        async with self._engine.begin() as conn:
            await creds.delete_session(conn, session_digest(session))

    async def _mint(self, conn: AsyncConnection, user_id: str, request: MintRequest) -> dict[str, Any]:
        user = await store.get(conn, t.users, user_id)
        assert user is not None
        if not user["enabled"]:
            raise Forbidden("user is disabled", code="user_disabled")
        project_id = await store.resolve_ref(conn, t.projects, request.project)
        if project_id is None or not await creds.membership(conn, user_id, project_id):
            raise Forbidden(f"user is not a member of project {request.project!r}", code="not_a_member")
        assert self._signer is not None, "boot attaches the signer before serving"
        token, claims = self._signer.mint(
            user_id=user_id, project_id=project_id, version=user["token_version"], ttl_s=request.ttl_seconds
        )
        expires = datetime.fromtimestamp(claims.expires_at, UTC)
        await creds.insert_token(
            conn,
            {
                "jti": claims.jti,
                "user_id": user_id,
                "project_id": project_id,
                "issued_at": datetime.fromtimestamp(claims.issued_at, UTC),
                "expires_at": expires,
            },
        )
        return {"token": token, "jti": claims.jti, "expires_at": rfc3339(expires)}

    async def revoke(self, jti: str) -> dict[str, Any]:
        async with self._engine.begin() as conn:
            row = await creds.get_token(conn, jti)
            if row is None:
                raise NotFound(f"token {jti!r} not found")
            await creds.revoke_token(conn, jti, utcnow())
            await creds.purge_expired(conn, utcnow())
            await store.bump_revision(conn)
            if row["revoked_at"] is None:  # a repeated revoke changes nothing
                shown = {"jti": jti, "user_id": row["user_id"], "project_id": row["project_id"]}
                after = {**shown, "expires_at": rfc3339(row["expires_at"]), "revoked": True}
                await self._catalog.audit.record(conn, "revoke", "Token", jti, after=after)
        await self._catalog.announce()
        return {"jti": jti, "revoked": True, "expires_at": rfc3339(row["expires_at"])}

    async def revoke_all(self, user_ref: str) -> dict[str, Any]:
        async with self._engine.begin() as conn:
            user_id = await store.resolve_ref(conn, t.users, user_ref)
            if user_id is None:
                raise NotFound(f"User {user_ref!r} not found")
            before = await store.get(conn, t.users, user_id)
            await creds.bump_token_version(conn, user_id)
            await store.bump_revision(conn)
            user = await store.get(conn, t.users, user_id)
            assert before is not None and user is not None
            await self._catalog.audit.record(
                conn,
                "revoke",
                "Token",
                f"user:{user_id}",  # every token of the user, as their ``sub`` claim names it
                before={"user_id": user_id, "token_version": before["token_version"]},
                after={"user_id": user_id, "token_version": user["token_version"]},
            )
        await self._catalog.announce()
        assert user is not None
        return {"user_id": user_id, "token_version": user["token_version"]}


def session_digest(session: str) -> str:
    return hashlib.sha256(session.encode()).hexdigest()
