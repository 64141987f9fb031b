"""Relay keys on the control plane (SPEC §3.1, §11): create, read, list, patch, rotate, revoke, delete.

Keys are not ``relay apply`` documents (their plaintext exists once), so they have their own service,
but they live in the catalog like everything else: every change bumps the revision and reaches every
replica's snapshot, which is where the hot path checks them. Rendered keys never carry the hash, the
previous hash or the plaintext; create and rotate return the plaintext beside the key, once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.services.catalog import CatalogService
from relay.control.services.validation import validated
from relay.domain.credentials import new_relay_key
from relay.domain.ids import NAME_PATTERN, mint_id
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest, NotFound, Unprocessable
from relay.store import catalog as store
from relay.store import tables as t
from relay.store.catalog import Row, utcnow

MAX_GRACE_S = 86400


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    principal_kind: Literal["serviceaccount", "user"]
    principal: str
    project: str | None = None
    policy: str | None = None
    name: str | None = Field(None, pattern=NAME_PATTERN)
    enabled: bool = True
    expires_at: datetime | None = None
    payload_logging: bool = False


class KeyPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str | None = Field(None, pattern=NAME_PATTERN)
    policy: str | None = None
    enabled: bool | None = None
    expires_at: datetime | None = None
    payload_logging: bool | None = None


class RotateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grace_seconds: int = Field(0, ge=0, le=MAX_GRACE_S)


class KeyService:
    def __init__(self, engine: AsyncEngine, catalog: CatalogService) -> None:
        self._engine = engine
        self._catalog = catalog

    async def create(self, payload: Any) -> dict[str, Any]:
        spec: KeyCreate = validated(KeyCreate, payload)
        new = new_relay_key()
        async with self._engine.begin() as conn:
            row = await self._new_row(conn, spec, new.key_hash, new.prefix)
            await store.insert_row(conn, t.relay_keys, row, kind="key")
            await store.bump_revision(conn)
            rendered = await self._render_one(conn, row["id"])
            await self._catalog.audit.record(conn, "create", "Key", row["id"], after=rendered)
        await self._catalog.announce()
        return {"key": rendered, "plaintext": new.plaintext}

    async def _new_row(self, conn: AsyncConnection, spec: KeyCreate, key_hash: str, prefix: str) -> Row:
        now = utcnow()
        row: Row = {
            "id": mint_id("key"),
            "name": spec.name or prefix,
            "created_at": now,
            "updated_at": now,
            "key_hash": key_hash,
            "prefix": prefix,
            "principal_kind": spec.principal_kind,
            "service_account_id": None,
            "user_id": None,
            "enabled": spec.enabled,
            "expires_at": spec.expires_at,
            "payload_logging": spec.payload_logging,
            "policy_id": await self._ref(conn, t.policies, "policy", "Policy", spec.policy),
        }
        if spec.principal_kind == "serviceaccount":
            account_id = await self._ref(
                conn, t.service_accounts, "principal", "ServiceAccount", spec.principal
            )
            account = await store.get(conn, t.service_accounts, account_id or "")
            assert account is not None
            project_id = await self._ref(conn, t.projects, "project", "Project", spec.project)
            if project_id is not None and project_id != account["project_id"]:
                raise InvalidRequest(
                    "project: a service account key belongs to the service account's project"
                )
            row.update(service_account_id=account["id"], project_id=account["project_id"])
            return row
        user_id = await self._ref(conn, t.users, "principal", "User", spec.principal)
        assert user_id is not None
        memberships = await store.children(conn, t.user_memberships, "user_id", [user_id])
        member_of = [m["project_id"] for m in memberships]
        project_id = await self._ref(conn, t.projects, "project", "Project", spec.project)
        if project_id is None:
            if len(member_of) != 1:
                raise InvalidRequest(
                    f"project: required for a user key when the user is a member of {len(member_of)} projects"
                )
            project_id = member_of[0]
        elif project_id not in member_of:
            raise Unprocessable(
                f"project: user {spec.principal!r} is not a member of project {spec.project!r}"
            )
        row.update(user_id=user_id, project_id=project_id)
        return row

    async def _ref(
        self, conn: AsyncConnection, table: Any, field: str, kind: str, ref: str | None
    ) -> str | None:
        if ref is None:
            return None
        object_id = await store.resolve_ref(conn, table, ref)
        if object_id is None:
            raise Unprocessable(f"{field}: {kind} {ref!r} not found")
        return object_id

    async def find(self, conn: AsyncConnection, ref: str) -> str:
        object_id = await store.resolve_ref(conn, t.relay_keys, ref)
        if object_id is None:
            raise NotFound(f"key {ref!r} not found")
        return object_id

    async def get(self, ref: str) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            return await self._render_one(conn, await self.find(conn, ref))

    async def list_all(self) -> list[dict[str, Any]]:
        async with self._engine.connect() as conn:
            return await self._render(conn, await store.list_rows(conn, t.relay_keys))

    async def patch(self, ref: str, payload: Any) -> dict[str, Any]:
        spec: KeyPatch = validated(KeyPatch, payload)
        given = spec.model_fields_set
        async with self._engine.begin() as conn:
            key_id = await self.find(conn, ref)
            before = await self._render_one(conn, key_id)
            values: Row = {"updated_at": utcnow()}
            for field in ("name", "enabled", "payload_logging"):
                if field in given:
                    if getattr(spec, field) is None:
                        raise InvalidRequest(f"{field}: may not be null")
                    values[field] = getattr(spec, field)
            if "expires_at" in given:
                values["expires_at"] = spec.expires_at
            if "policy" in given:
                values["policy_id"] = await self._ref(conn, t.policies, "policy", "Policy", spec.policy)
            await store.update_row(conn, t.relay_keys, key_id, values, kind="key")
            await store.bump_revision(conn)
            rendered = await self._render_one(conn, key_id)
            await self._catalog.audit.record(conn, "update", "Key", key_id, before=before, after=rendered)
        await self._catalog.announce()
        return rendered

    async def rotate(self, ref: str, payload: Any) -> dict[str, Any]:
        spec: RotateRequest = validated(RotateRequest, payload or {})
        new = new_relay_key()
        async with self._engine.begin() as conn:
            key_id = await self.find(conn, ref)
            current = await store.get(conn, t.relay_keys, key_id)
            assert current is not None
            before = await self._render_one(conn, key_id)
            now = utcnow()
            values = {
                "key_hash": new.key_hash,
                "prefix": new.prefix,
                "previous_key_hash": current["key_hash"],
                "grace_until": now + timedelta(seconds=spec.grace_seconds),
                "updated_at": now,
            }
            await store.update_row(conn, t.relay_keys, key_id, values, kind="key")
            await store.bump_revision(conn)
            rendered = await self._render_one(conn, key_id)
            await self._catalog.audit.record(conn, "rotate", "Key", key_id, before=before, after=rendered)
        await self._catalog.announce()
        return {"key": rendered, "plaintext": new.plaintext}

    async def revoke(self, ref: str) -> dict[str, Any]:
        async with self._engine.begin() as conn:
            key_id = await self.find(conn, ref)
            current = await store.get(conn, t.relay_keys, key_id)
            assert current is not None
            before = await self._render_one(conn, key_id)
            rendered = before
            if current["revoked_at"] is None:  # idempotent: the first revocation time stands
                now = utcnow()
                await store.update_row(
                    conn, t.relay_keys, key_id, {"revoked_at": now, "updated_at": now}, kind="key"
                )
                await store.bump_revision(conn)
                rendered = await self._render_one(conn, key_id)
                await self._catalog.audit.record(conn, "revoke", "Key", key_id, before=before, after=rendered)
        await self._catalog.announce()
        return rendered

    async def delete(self, ref: str) -> None:
        async with self._engine.begin() as conn:
            key_id = await self.find(conn, ref)
            before = await self._render_one(conn, key_id)
            await store.delete_row(conn, t.relay_keys, key_id, kind="key", name=ref)
            await store.bump_revision(conn)
            await self._catalog.audit.record(conn, "delete", "Key", key_id, before=before)
        await self._catalog.announce()

    async def _render_one(self, conn: AsyncConnection, key_id: str) -> dict[str, Any]:
        row = await store.get(conn, t.relay_keys, key_id)
        if row is None:
            raise NotFound(f"key {key_id!r} not found")
        return (await self._render(conn, [row]))[0]

    async def _render(self, conn: AsyncConnection, rows: list[Row]) -> list[dict[str, Any]]:
        accounts = await store.names(conn, t.service_accounts, (r["service_account_id"] for r in rows))
        users = await store.names(conn, t.users, (r["user_id"] for r in rows))
        projects = await store.names(conn, t.projects, (r["project_id"] for r in rows))
        policies = await store.names(conn, t.policies, (r["policy_id"] for r in rows))
        out = []
        for r in rows:
            principal_id = r["service_account_id"] or r["user_id"]
            principal_names = accounts if r["principal_kind"] == "serviceaccount" else users
            out.append(
                {
                    "id": r["id"],
                    "name": r["name"],
                    "prefix": r["prefix"],
                    "principal_kind": r["principal_kind"],
                    "principal": principal_names.get(principal_id),
                    "principal_id": principal_id,
                    "project": projects.get(r["project_id"]),
                    "project_id": r["project_id"],
                    "policy": policies.get(r["policy_id"]),
                    "policy_id": r["policy_id"],
                    "enabled": r["enabled"],
                    "expires_at": rfc3339(r["expires_at"]),
                    "revoked_at": rfc3339(r["revoked_at"]),
                    "grace_until": rfc3339(r["grace_until"]) if r["previous_key_hash"] else None,
                    "payload_logging": r["payload_logging"],
                    "created_at": rfc3339(r["created_at"]),
                    "updated_at": rfc3339(r["updated_at"]),
                }
            )
        return out
