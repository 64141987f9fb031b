"""The catalog service: create, read, list, patch and delete any kind of ``control.kinds``.

It owns what stores must not know: validating specs, minting ids and timestamps, resolving references
(name or id) to ids, sealing host-key values and webhook secrets (generating a webhook's secret when
none is given: shown once, in the create answer) and hashing passwords, and rendering rows for the API
(references as names plus ``<field>_id``; write-only fields never). Every write runs in one
transaction that also bumps the catalog revision; after commit the change feed tells every replica.

The transaction-scoped methods (``*_in``) let ``relay apply`` compose many writes into one
all-or-nothing transaction with exactly the same rules as single writes.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.control.audit.log import AuditLog
from relay.control.audit.views import audit_view
from relay.control.kinds import ChildList, Kind, RefField, shown_batch_block, stored_batch_block
from relay.crypto.passwords import hash_password
from relay.crypto.sealing import SecretBox
from relay.domain.guardrail_spec import GuardrailSpec
from relay.domain.ids import mint_id
from relay.domain.kind_specs import FROM_CATALOG, WEBHOOK_SECRET_PREFIX
from relay.domain.times import rfc3339
from relay.errors import Conflict, InvalidRequest, NotFound, Unprocessable
from relay.pricing.catalog import PriceCatalog, load_catalog
from relay.store import catalog as store
from relay.store.catalog import Row, utcnow
from relay.store.tables import models as models_table

_HIDDEN_COLUMNS = {"password_hash", "value_encrypted", "secret_encrypted"}


def new_webhook_secret() -> str:
    """SPEC §10.10: ``whsec_`` + base64 of 32 random bytes (the Standard Webhooks form)."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()


def with_generated_secret(kind: Kind, spec: BaseModel) -> tuple[BaseModel, str | None]:
    """A webhook created without a ``secret`` gets a generated one: the spec to write, and the secret
    to hand back ONCE in the create answer (None when nothing was generated)."""
    if kind.name != "Webhook" or getattr(spec, "secret", None) is not None:
        return spec, None
    secret = new_webhook_secret()
    return spec.model_copy(update={"secret": secret}), secret


_Spec = TypeVar("_Spec", bound=BaseModel)


def validation_message(exc: ValidationError) -> str:
    """``field.path: message`` for the first few problems, so the caller knows exactly what to fix."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


#: Fields whose invalid values answer 422 rather than the control plane's usual 400: the SPEC says
#: so for them (§19's ``cache`` block, §22's ``batch_offload``, and every field of a §20 guardrail); the
#: message names the field either way.
UNPROCESSABLE_FIELDS = frozenset(("cache", "batch_offload"))


def validated(model: type[_Spec], payload: Any) -> _Spec:
    """``payload`` as ``model``, or a 400 (422 for :data:`UNPROCESSABLE_FIELDS`) naming the fields
    that are wrong (the control plane's one body-validation rule)."""
    if not isinstance(payload, dict):
        raise InvalidRequest("body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0].get("loc", ()) if exc.errors() else ()
        if (first and first[0] in UNPROCESSABLE_FIELDS) or model is GuardrailSpec:
            raise InvalidRequest(validation_message(exc), status=422, code="unprocessable") from None
        raise InvalidRequest(validation_message(exc)) from None


class CatalogService:
    def __init__(
        self,
        engine: AsyncEngine,
        box: SecretBox,
        announce: Callable[[], Awaitable[object]],
        audit: AuditLog | None = None,
    ) -> None:
        self._engine = engine
        self._box = box
        self._announce = announce
        self.audit = audit or AuditLog(engine)
        self._prices: PriceCatalog | None = None

    async def announce(self) -> None:
        """Make this replica serve the committed change before answering (other replicas learn of it
        from the notice sent inside the transaction); call after commit."""
        await self._announce()

    async def force_reload(self) -> int:
        async with self._engine.begin() as conn:
            revision = await store.bump_revision(conn)
        await self._announce()
        return revision

    # -- single-object operations: one transaction each --------------------------------------------

    async def create(self, kind: Kind, payload: Any) -> dict[str, Any]:
        spec, generated = with_generated_secret(kind, self.validate(kind, payload))
        async with self._engine.begin() as conn:
            object_id = await self.create_in(conn, kind, spec)
            await store.bump_revision(conn)
            rendered = await self.render_one(conn, kind, object_id)
            after = await audit_view(self, conn, kind, object_id, rendered)
            await self.audit.record(conn, "create", kind.name, object_id, after=after)
        await self._announce()
        if generated is not None:
            rendered["secret"] = generated  # the one time it is shown (SPEC §10.10)
        return rendered

    async def get(self, kind: Kind, ref: str) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            return await self.render_one(conn, kind, await self.find(conn, kind, ref))

    async def list_all(self, kind: Kind) -> list[dict[str, Any]]:
        async with self._engine.connect() as conn:
            return await self.render(conn, kind, await store.list_rows(conn, kind.table))

    async def patch(self, kind: Kind, ref: str, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise InvalidRequest("body must be a JSON object")
        async with self._engine.begin() as conn:
            object_id = await self.find(conn, kind, ref)
            before = await audit_view(self, conn, kind, object_id)
            current = await self.spec_of(conn, kind, object_id, before)
            if any(alt in payload for alt in kind.alternatives):
                current = {k: v for k, v in current.items() if k not in kind.alternatives}
            spec = self.validate(kind, {**current, **payload})
            await self.update_in(conn, kind, object_id, spec, given=set(payload))
            await store.bump_revision(conn)
            rendered = await self.render_one(conn, kind, object_id)
            after = await audit_view(self, conn, kind, object_id, rendered)
            await self.audit.record(conn, "update", kind.name, object_id, before=before, after=after)
        await self._announce()
        return rendered

    async def delete(self, kind: Kind, ref: str) -> None:
        async with self._engine.begin() as conn:
            object_id = await self.find(conn, kind, ref)
            before = await audit_view(self, conn, kind, object_id)
            await self.delete_in(conn, kind, object_id)
            await store.bump_revision(conn)
            await self.audit.record(conn, "delete", kind.name, object_id, before=before)
        await self._announce()

    # -- transaction-scoped building blocks (also used by apply) ----------------------------------

    def validate(self, kind: Kind, payload: Any) -> BaseModel:
        return validated(kind.spec, payload)

    async def find(self, conn: AsyncConnection, kind: Kind, ref: str) -> str:
        object_id = await store.resolve_ref(conn, kind.table, ref)
        if object_id is None:
            raise NotFound(f"{kind.name} {ref!r} not found")
        return object_id

    async def find_optional(self, conn: AsyncConnection, kind: Kind, ref: str) -> str | None:
        return await store.resolve_ref(conn, kind.table, ref)

    async def create_in(self, conn: AsyncConnection, kind: Kind, spec: BaseModel) -> str:
        data = spec.model_dump()
        if kind.name == "HostKey" and data["value"] is None and data["value_from_env"] is None:
            raise InvalidRequest("value: a host key needs a value or value_from_env")
        if kind.name == "Webhook" and data["secret"] is None:
            raise InvalidRequest("secret: required (with_generated_secret makes one)")
        object_id = mint_id(kind.id_prefix)
        now = utcnow()
        row = {"id": object_id, "name": data["name"], "created_at": now, "updated_at": now}
        row.update(await self._columns(conn, kind, object_id, data, given=set(data)))
        await store.insert_row(conn, kind.table, row, kind=kind.name)
        await self._write_children(conn, kind, object_id, data)
        await self._check_model_names(conn, kind, object_id, data)
        return object_id

    async def update_in(
        self, conn: AsyncConnection, kind: Kind, object_id: str, spec: BaseModel, *, given: set[str]
    ) -> None:
        data = spec.model_dump()
        values = {"name": data["name"], "updated_at": utcnow()}
        values.update(await self._columns(conn, kind, object_id, data, given=given))
        if kind.name == "User" and data["enabled"] is False:
            current = await store.get(conn, kind.table, object_id)
            if current is not None and current["enabled"]:
                # SPEC §3.2: disabling a user revokes every token it holds.
                values["token_version"] = current["token_version"] + 1
        await store.update_row(conn, kind.table, object_id, values, kind=kind.name)
        await self._write_children(conn, kind, object_id, data)
        await self._check_model_names(conn, kind, object_id, data)

    async def delete_in(self, conn: AsyncConnection, kind: Kind, object_id: str) -> None:
        row = await store.get(conn, kind.table, object_id)
        await store.delete_row(
            conn, kind.table, object_id, kind=kind.name, name=row["name"] if row else object_id
        )

    async def spec_of(
        self, conn: AsyncConnection, kind: Kind, object_id: str, rendered: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The object as a spec document (references by name, no write-only fields): what a PATCH is
        overlaid on and what ``relay export`` writes. ``rendered``: its rendering, when at hand."""
        rendered = rendered if rendered is not None else await self.render_one(conn, kind, object_id)
        fields = set(kind.spec.model_fields) - set(kind.write_only)
        out = {name: rendered[name] for name in fields if name in rendered}
        if kind.name == "Binding" and isinstance(out.get("pricing"), dict) and "written_as" in out["pricing"]:
            out["pricing"] = out["pricing"]["written_as"]  # a catalog reference, as it was written
        for child in kind.children:
            if child.ref_fields:
                out[child.field] = [
                    {f.field: item[f.field] for f in child.ref_fields} for item in out[child.field]
                ]
        return out

    async def _check_model_names(
        self, conn: AsyncConnection, kind: Kind, object_id: str, data: Mapping[str, Any]
    ) -> None:
        """Callers name models by name or alias, so the two share one namespace (the database enforces
        uniqueness within names and within aliases; this checks across them)."""
        if kind.name != "Model":
            return
        clash = await store.model_name_clash(conn, object_id, data["name"], data["aliases"])
        if clash:
            raise Conflict(f"model name or alias {clash!r} is already used by another model")

    # -- rows <-> specs -------------------------------------------------------------------------

    async def _columns(
        self, conn: AsyncConnection, kind: Kind, object_id: str, data: Mapping[str, Any], *, given: set[str]
    ) -> Row:
        values: Row = {name: data[name] for name in kind.plain}
        for name in kind.json:
            values[name] = data[name]
        for ref in kind.refs:
            values[ref.column] = await self._resolve(conn, ref, data[ref.field])
        if kind.name == "User" and "password" in given:
            password = data.get("password")
            values["password_hash"] = await hash_password(password) if password else None
        if kind.name == "Binding":
            values["pricing"] = await self._pricing(conn, data)
        if kind.name == "Policy":
            await self._check_fallbacks(conn, data["fallbacks"])
            values["batch"] = stored_batch_block(data["batch"])
        if kind.name == "HostKey":
            if data.get("value") is not None and "value" in given:
                values["value_encrypted"] = self._box.seal(data["value"], bound_to=object_id)
                values["value_from_env"] = None
            elif data.get("value_from_env") is not None and "value_from_env" in given:
                values["value_encrypted"] = None
            else:
                values.pop("value_from_env")  # neither source given: keep the stored one
        if kind.name == "Webhook" and data.get("secret") is not None and "secret" in given:
            values["secret_encrypted"] = self._box.seal(data["secret"], bound_to=object_id)
        return values

    async def _check_fallbacks(self, conn: AsyncConnection, fallbacks: Mapping[str, list[str]]) -> None:
        """Every model a policy's ``fallbacks`` names exists (by name or alias), and none falls back to
        itself under another name (SPEC §4: the map is refused whole, nothing is written)."""
        if not fallbacks:
            return
        names = {name for model, chain in fallbacks.items() for name in (model, *chain)}
        found = await store.model_ids_by_name(conn, names)
        for model, chain in fallbacks.items():
            for name in (model, *chain):
                if name not in found:
                    raise InvalidRequest(f"fallbacks.{model}: model {name!r} not found")
            if any(found[name] == found[model] for name in chain):
                raise InvalidRequest(f"fallbacks.{model}: a model cannot fall back to itself")

    def price_catalog(self) -> PriceCatalog:
        """The shipped price catalog, read on first use (only bindings that reference it need it)."""
        if self._prices is None:
            self._prices = load_catalog()
        return self._prices

    async def _pricing(self, conn: AsyncConnection, data: Mapping[str, Any]) -> Any:
        """A binding's stored ``pricing``: typed prices as they are; a catalog reference resolved to
        the entry's prices now (the hot path then reads plain numbers), keeping what was written
        (``written_as``, what export and PATCH show), the entry's name and the catalog's date."""
        pricing = data.get("pricing")
        if pricing != FROM_CATALOG and not (isinstance(pricing, dict) and "from_catalog" in pricing):
            return pricing
        prices = self.price_catalog()
        if isinstance(pricing, dict):
            entry = prices.find(pricing["from_catalog"])
            if entry is None:
                raise InvalidRequest(
                    f"pricing.from_catalog: {pricing['from_catalog']!r} is not in the price catalog "
                    f"(dated {prices.date}); see docs/policies.md for its models, or type the prices"
                )
        else:
            model_id = await store.resolve_ref(conn, models_table, data["model"])
            names = await store.names(conn, models_table, [model_id]) if model_id is not None else {}
            model_name = names.get(model_id or "", "")
            candidates = [str(n) for n in (data.get("upstream_name"), model_name or data["model"]) if n]
            entry = next((e for n in candidates if (e := prices.find(n)) is not None), None)
            if entry is None:
                raise InvalidRequest(
                    f"pricing: none of {candidates} is in the price catalog (dated {prices.date}); "
                    "name the entry with pricing: {from_catalog: <name>} or type the prices"
                )
        return {
            **entry.pricing(),
            "from_catalog": entry.name,
            "catalog_date": prices.date,
            "written_as": pricing,
        }

    async def _resolve(self, conn: AsyncConnection, ref: RefField, value: str | None) -> str | None:
        if value is None:
            return None
        object_id = await store.resolve_ref(conn, ref.target, value)
        if object_id is None:
            raise Unprocessable(f"{ref.field}: {ref.target_kind} {value!r} not found")
        return object_id

    async def _write_children(
        self, conn: AsyncConnection, kind: Kind, object_id: str, data: Mapping[str, Any]
    ) -> None:
        for child in kind.children:
            rows = []
            for position, item in enumerate(data[child.field]):
                row: Row = {child.parent_column: object_id, "position": position}
                if child.ref_fields:
                    for ref in child.ref_fields:
                        row[ref.column] = await self._resolve(conn, ref, item[ref.field])
                elif child.target is not None:
                    target = RefField(
                        child.field, child.value_column or "", child.target, child.target_kind or ""
                    )
                    row[target.column] = await self._resolve(conn, target, item)
                else:
                    row[child.value_column or ""] = item
                rows.append(row)
            await store.replace_children(
                conn, child.table, child.parent_column, object_id, rows, kind=kind.name
            )

    async def render_one(self, conn: AsyncConnection, kind: Kind, object_id: str) -> dict[str, Any]:
        row = await store.get(conn, kind.table, object_id)
        if row is None:
            raise NotFound(f"{kind.name} {object_id!r} not found")
        return (await self.render(conn, kind, [row]))[0]

    async def render(self, conn: AsyncConnection, kind: Kind, rows: list[Row]) -> list[dict[str, Any]]:
        ids = [r["id"] for r in rows]
        ref_names = {}
        for ref in kind.refs:
            ref_names[ref.field] = await store.names(conn, ref.target, (r[ref.column] for r in rows))
        child_rows = {
            c.field: await store.children(conn, c.table, c.parent_column, ids) for c in kind.children
        }
        out = []
        for row in rows:
            item: dict[str, Any] = {"id": row["id"], "name": row["name"]}
            for ref in kind.refs:
                item[ref.field] = ref_names[ref.field].get(row[ref.column])
                item[ref.field + "_id"] = row[ref.column]
            for column, value in row.items():
                if column in item or column in _HIDDEN_COLUMNS or column in {r.column for r in kind.refs}:
                    continue
                item[column] = rfc3339(value) if isinstance(value, datetime) else value
            for child in kind.children:
                mine = [c for c in child_rows[child.field] if c[child.parent_column] == row["id"]]
                item[child.field] = await self._render_children(conn, child, mine)
            if kind.name == "HostKey":
                item["has_value"] = row["value_encrypted"] is not None
            if kind.name == "Policy" and item.get("fallbacks") is None:
                item["fallbacks"] = {}  # written before fallbacks existed (migration 0007)
            if kind.name == "Policy":
                item["batch"] = shown_batch_block(row.get("batch"))
            out.append(item)
        return out

    async def _render_children(self, conn: AsyncConnection, child: ChildList, rows: list[Row]) -> list[Any]:
        if child.ref_fields:
            rendered = []
            for row in rows:
                entry: dict[str, Any] = {}
                for ref in child.ref_fields:
                    entry[ref.field] = (await store.names(conn, ref.target, [row[ref.column]])).get(
                        row[ref.column]
                    )
                    entry[ref.field + "_id"] = row[ref.column]
                rendered.append(entry)
            return rendered
        if child.target is not None:
            names = await store.names(conn, child.target, (r[child.value_column or ""] for r in rows))
            return [names.get(r[child.value_column or ""]) for r in rows]
        return [r[child.value_column or ""] for r in rows]
