"""``POST /api/apply`` and ``relay export``: the catalog as declarative documents.

A document is ``{kind, name, spec}``. Apply validates every document first, then, in one transaction,
creates or updates them in dependency order (teams and hosts before what references them) and, with
``prune``, deletes objects of the applied kinds that the documents do not name, in reverse order. The
plan says, per object, ``create``, ``update`` (with ``changes``: each changed field's ``from`` and ``to``,
write-only values masked), ``unchanged`` or ``delete``; a webhook created without a ``secret`` gets
one generated, returned in its plan step (``secret``) this once and never again (not in a dry run,
which stores nothing); ``dry_run`` computes the same
plan inside the transaction and rolls it back, so a dry run catches exactly the errors a real run would.
Every refusal of a document names it, ``documents[<index>] (<Kind> <name>): …``, whether the document
is wrong alone (a bad field) or only against the catalog (a reference to nothing).

"Unchanged" compares the document with the stored object after resolving references to names, and
compares write-only values against what is stored (the sealed host-key value, the password hash), so
applying the same file twice writes nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.context import current
from relay.control.audit.views import audit_view
from relay.control.kinds import BY_NAME, KINDS, Kind
from relay.control.services.catalog import CatalogService
from relay.control.services.webhook_secrets import with_generated_secret
from relay.crypto.passwords import verify_password
from relay.crypto.sealing import SecretBox
from relay.domain.batch_policy import BatchPolicy
from relay.domain.ids import mint_id
from relay.errors import InvalidRequest, RelayError, Unprocessable
from relay.store import catalog as store

MASK = "********"


class _Rollback(Exception):
    pass


class ApplyService:
    def __init__(self, engine: AsyncEngine, catalog: CatalogService, box: SecretBox) -> None:
        self._engine = engine
        self._catalog = catalog
        self._box = box
        self._audit = catalog.audit

    async def apply(self, documents: Any, *, dry_run: bool, prune: bool) -> list[dict[str, Any]]:
        parsed = self._parse(documents)
        plan: list[dict[str, Any]] = []
        entries: list[dict[str, Any]] = []  # the audit entries, appended last (SPEC §21)
        changed = False
        try:
            async with self._engine.begin() as conn:
                for kind in KINDS:
                    for index, name, payload in parsed.get(kind.name, []):
                        try:
                            action, changes, secret = await self._apply_one(
                                conn, kind, name, payload, entries
                            )
                        except RelayError as exc:
                            # In a file of dozens of documents, "model: Model 'x' not found" alone
                            # does not say which one refers to it.
                            exc.message = f"documents[{index}] ({kind.name} {name}): {exc.message}"
                            raise
                        step: dict[str, Any] = {"kind": kind.name, "name": name, "action": action}
                        if changes:
                            step["changes"] = changes
                        if secret is not None and not dry_run:
                            step["secret"] = secret  # generated: shown this once (SPEC §10.10)
                        plan.append(step)
                if prune:
                    for kind in reversed(KINDS):
                        if kind.name not in parsed:
                            continue
                        named = {n for _, n, _ in parsed[kind.name]}
                        for row in await store.list_rows(conn, kind.table):
                            if row["name"] not in named:
                                before = await audit_view(self._catalog, conn, kind, row["id"])
                                await self._catalog.delete_in(conn, kind, row["id"])
                                entries.append(
                                    self._audit.entry("delete", kind.name, row["id"], before=before)
                                )
                                plan.append({"kind": kind.name, "name": row["name"], "action": "delete"})
                changed = any(step["action"] != "unchanged" for step in plan)
                if dry_run:
                    raise _Rollback
                if changed:
                    await store.bump_revision(conn)
                    summary = [{k: step[k] for k in ("kind", "name", "action")} for step in plan]
                    after = {"documents": len(documents), "prune": prune, "plan": summary}
                    ref = current().request_id or mint_id("apl")
                    entries.append(self._audit.entry("apply", "Catalog", ref, after=after))
                    await self._audit.append(conn, entries)
        except _Rollback:
            return plan
        if changed:
            await self._catalog.announce()
        return plan

    def _parse(self, documents: Any) -> dict[str, list[tuple[int, str, dict[str, Any]]]]:
        """Every document checked alone, grouped by kind: ``(index in documents, name, payload)``."""
        if not isinstance(documents, list):
            raise InvalidRequest("documents: must be a list of {kind, name, spec}")
        parsed: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
        seen: set[tuple[str, str]] = set()
        for index, doc in enumerate(documents):
            where = f"documents[{index}]"
            if not isinstance(doc, dict):
                raise InvalidRequest(f"{where}: must be an object with kind, name and spec")
            unknown = set(doc) - {"kind", "name", "spec"}
            if unknown:
                raise InvalidRequest(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
            kind = BY_NAME.get(doc.get("kind"))  # type: ignore[arg-type]
            if kind is None:
                raise InvalidRequest(f"{where}.kind: must be one of {', '.join(k.name for k in KINDS)}")
            name, spec = doc.get("name"), doc.get("spec", {})
            if not isinstance(name, str):
                raise InvalidRequest(f"{where}.name: required string")
            if not isinstance(spec, dict) or "name" in spec:
                raise InvalidRequest(f"{where}.spec: must be an object (the name goes beside it)")
            if (kind.name, name) in seen:
                raise InvalidRequest(f"{where}: {kind.name} {name!r} appears twice")
            seen.add((kind.name, name))
            payload = {"name": name, **spec}
            try:
                self._catalog.validate(kind, payload)
            except InvalidRequest as exc:
                raise InvalidRequest(
                    f"{where} ({kind.name} {name}): {exc.message}", status=exc.status, code=exc.code
                ) from None
            parsed.setdefault(kind.name, []).append((index, name, payload))
        return parsed

    async def _apply_one(
        self,
        conn: AsyncConnection,
        kind: Kind,
        name: str,
        payload: dict[str, Any],
        entries: list[dict[str, Any]],
    ) -> tuple[str, dict[str, dict[str, Any]] | None, str | None]:
        """(action, changes, the secret generated for a new webhook that names none); the audit
        entry of a change is added to ``entries``."""
        object_id = await self._catalog.find_optional(conn, kind, name)
        if object_id is None:
            if (
                kind.name == "HostKey"
                and payload.get("value") is None
                and payload.get("value_from_env") is None
            ):
                raise Unprocessable(
                    "a new host key needs value or value_from_env (exported documents omit stored values)"
                )
            spec, generated = with_generated_secret(kind, self._catalog.validate(kind, payload))
            object_id = await self._catalog.create_in(conn, kind, spec)
            after = await audit_view(self._catalog, conn, kind, object_id)
            entries.append(self._audit.entry("create", kind.name, object_id, after=after))
            return "create", None, generated
        current = await self._catalog.spec_of(conn, kind, object_id)
        if kind.name == "HostKey" and payload.get("value") is None and payload.get("value_from_env") is None:
            payload = {**payload, "value_from_env": current.get("value_from_env")}
        spec = self._catalog.validate(kind, payload)
        changes = await self._changes(conn, kind, object_id, current, spec.model_dump())
        if not changes:
            return "unchanged", None, None
        given = {k for k in payload if payload[k] is not None or k not in kind.write_only}
        before = await audit_view(self._catalog, conn, kind, object_id)
        await self._catalog.update_in(conn, kind, object_id, spec, given=given)
        after = await audit_view(self._catalog, conn, kind, object_id)
        entries.append(self._audit.entry("update", kind.name, object_id, before=before, after=after))
        return "update", changes, None

    async def _changes(
        self,
        conn: AsyncConnection,
        kind: Kind,
        object_id: str,
        current: dict[str, Any],
        wanted: dict[str, Any],
    ) -> dict[str, dict[str, Any]]:
        """``{field: {"from", "to"}}`` for every field the document changes ({} = unchanged); a
        write-only value (host key value, password) shows as ``********`` on both sides."""
        normalized = await self._names_for_refs(conn, kind, wanted)
        comparable = {k: v for k, v in normalized.items() if k not in kind.write_only}
        changes = {k: {"from": current.get(k), "to": v} for k, v in comparable.items() if current.get(k) != v}
        row = await store.get(conn, kind.table, object_id)
        assert row is not None
        if kind.name == "HostKey" and wanted.get("value") is not None:
            sealed = row["value_encrypted"]
            if sealed is None or self._box.open(sealed, bound_to=object_id) != wanted["value"]:
                changes["value"] = {"from": MASK if sealed is not None else None, "to": MASK}
        secret = wanted.get("secret") if kind.name == "Webhook" else None
        if secret is not None and self._box.open(row["secret_encrypted"], bound_to=object_id) != secret:
            changes["secret"] = {"from": MASK, "to": MASK}
        password = wanted.get("password") if kind.name == "User" else None
        if password is not None and not await verify_password(row["password_hash"], password):
            changes["password"] = {"from": MASK, "to": MASK}
        return changes

    async def _names_for_refs(
        self, conn: AsyncConnection, kind: Kind, data: dict[str, Any]
    ) -> dict[str, Any]:
        out = dict(data)
        for ref in kind.refs:
            out[ref.field] = await self._name(conn, ref.target, data[ref.field])
        for child in kind.children:
            if child.ref_fields:
                out[child.field] = [
                    {f.field: await self._name(conn, f.target, item[f.field]) for f in child.ref_fields}
                    for item in data[child.field]
                ]
            elif child.target is not None:
                out[child.field] = [await self._name(conn, child.target, item) for item in data[child.field]]
        if isinstance(out.get("pricing"), dict):
            out["pricing"] = dict(out["pricing"])
        return out

    @staticmethod
    async def _name(conn: AsyncConnection, table: Any, ref: str | None) -> str | None:
        if ref is None:
            return None
        object_id = await store.resolve_ref(conn, table, ref)
        if object_id is None:
            return ref  # unresolvable: differs from anything stored, and the write will say why
        return (await store.names(conn, table, [object_id]))[object_id]

    async def export(self) -> list[dict[str, Any]]:
        documents = []
        async with self._engine.connect() as conn:
            for kind in KINDS:
                for row in await store.list_rows(conn, kind.table):
                    spec = await self._catalog.spec_of(conn, kind, row["id"])
                    name = spec.pop("name")
                    documents.append({"kind": kind.name, "name": name, "spec": _order(kind, spec)})
        return documents


def _order(kind: Kind, spec: dict[str, Any]) -> dict[str, Any]:
    """Spec fields in the model's declaration order, dropping nulls and a policy's default ``batch``
    block (SPEC §17: written only when chosen), so exports read naturally."""
    if kind.name == "Policy" and BatchPolicy.model_validate(spec.get("batch") or {}).is_default:
        spec = {k: v for k, v in spec.items() if k != "batch"}
    return {f: spec[f] for f in kind.spec.model_fields if f in spec and spec[f] is not None}
