"""The control API's OpenAPI document, told truthfully (SPEC §11: ``GET /api/openapi.json``).

FastAPI derives the document from the routes, which knows only the 2xx of each handler and a 422 for
validation — but Relay answers validation failures with 400, uses 422 for a reference to nothing, and
answers 401, 404, 408, 409, 413, 429, 431 and 500 in one error shape. This module rewrites the generated
document once: every operation lists every status it can answer, each error with the ``Error`` schema,
catalog routes get their real response schemas (the object as rendered: the kind's fields without
its write-only ones, plus ``id``, ``created_at``, ``updated_at`` and each reference's ``<field>_id``), and
every other route the model of its answer from :mod:`relay.control.routes.answers` (FastAPI only knows them
as "an object": the handlers return plain dicts). A create whose answer adds a field once (a webhook's
generated ``secret``) is declared as ``<Kind>Created``: the object plus that optional field.

What it deliberately does not know: how the routes work (only paths and methods).
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from relay.control.kinds import KINDS, Kind
from relay.control.routes.answers import ANSWERS, Answer

ERROR = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
OPEN = ("/api/openapi.json", "/api/docs")
#: Fields a kind's create answer adds to its object, once: a webhook created without a ``secret`` is
#: answered with the generated one (``relay.control.services.webhook_secrets.with_generated_secret``,
#: SPEC §10.10).
CREATE_EXTRAS: dict[str, dict[str, Any]] = {
    "Webhook": {
        "secret": {
            "type": "string",
            "description": "the generated signing secret, shown only here (absent when the create gave one)",
        }
    }
}
WHY = {
    "400": "bad request: invalid JSON (too deep, a lone surrogate), an invalid field, bad query",
    "401": "missing or wrong admin bearer (or user session on /api/auth/*); checked before the body",
    "404": "no such object",
    "408": "headers or body did not arrive in time",
    "409": "conflict: a duplicate name, or the object is still referenced",
    "413": "body over RELAY_CONTROL_MAX_REQUEST_BYTES (login: 4 KiB)",
    "422": "a reference names no existing object",
    "429": "too many failed logins (Retry-After)",
    "431": "request headers too large or too many",
    "500": "internal error (details in the log)",
}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the rewritten document (built once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = rewrite(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def rewrite(document: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    kinds = {f"/api/{k.plural}": k for k in KINDS}
    for kind in KINDS:
        schemas[f"{kind.name}Object"] = object_schema(kind, schemas)
        extras = CREATE_EXTRAS.get(kind.name)
        if extras is not None:
            schemas[f"{kind.name}Created"] = created_schema(kind, schemas[f"{kind.name}Object"], extras)
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            _errors(path, method, operation)
            _known_answers(path, method, operation, schemas)
            base = path.removesuffix("/{ref}")
            owner = kinds.get(base)
            if owner is not None:
                _kind_response(owner, path != base, method, operation)
    return doc


def _errors(path: str, method: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    codes = ["400", "408", "431", "500"]
    if not path.startswith(OPEN):
        codes.append("401")
    if method in ("post", "put", "patch", "delete"):
        codes.append("413")
    if "{" in path:
        codes.append("404")
    if method in ("post", "patch", "delete") and not path.startswith("/api/auth/"):
        codes += ["409", "422"]
    if path == "/api/auth/login":
        codes.append("429")
    for code in sorted(codes):
        responses[code] = _json(WHY[code], ERROR)


def _known_answers(path: str, method: str, operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    responses = operation["responses"]
    for code, answer in responses.items():
        if code == "204":
            answer.pop("content", None)  # no body
    known = ANSWERS.get((method, path))
    if known is not None:
        code, model = known
        description = responses.get(code, {}).get("description", "success")
        responses[code] = _json(description, answer_schema(model, schemas))


def answer_schema(model: type[Answer], schemas: dict[str, Any]) -> dict[str, Any]:
    """A reference to ``model``'s schema, registered (with the models it nests) in ``schemas``."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
    for name, definition in [*schema.pop("$defs", {}).items(), (model.__name__, schema)]:
        if schemas.setdefault(name, definition) != definition:
            raise RuntimeError(f"two schemas are named {name!r} in the OpenAPI document")
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def object_schema(kind: Kind, schemas: dict[str, Any]) -> dict[str, Any]:
    """The rendered object of ``kind``: its spec's fields minus the write-only ones, plus the common
    read-only fields and ``<reference>_id`` beside each reference."""
    spec = kind.spec.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in spec.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    properties = {k: v for k, v in spec.get("properties", {}).items() if k not in kind.write_only}
    for ref in kind.refs:
        properties[f"{ref.field}_id"] = {"type": ["string", "null"]}
    for child in kind.children:
        if child.ref_fields:  # each entry: its references by name, and by id beside them
            entry = {
                "type": "object",
                "required": [name for ref in child.ref_fields for name in (ref.field, f"{ref.field}_id")],
                "properties": {
                    name: {"type": ["string", "null"]}
                    for ref in child.ref_fields
                    for name in (ref.field, f"{ref.field}_id")
                },
                "additionalProperties": False,
            }
            properties[child.field] = {"type": "array", "items": entry}
    if kind.name == "HostKey":
        properties["has_value"] = {"type": "boolean", "description": "a value is stored (never shown)"}
    for name in kind.read_only:
        properties.setdefault(name, {})
    common = {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
    }
    return {
        "type": "object",
        "title": f"{kind.name}Object",
        "required": list(common),
        "properties": {**common, **properties},
        "additionalProperties": False,
    }


def created_schema(kind: Kind, rendered: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """The create answer of ``kind``: its rendered object plus the optional ``extras`` (still closed:
    anything else in the answer is a lie of the document)."""
    schema = copy.deepcopy(rendered)
    schema["title"] = f"{kind.name}Created"
    schema["properties"].update(copy.deepcopy(extras))
    return schema


def _kind_response(kind: Kind, one: bool, method: str, operation: dict[str, Any]) -> None:
    ref = {"$ref": f"#/components/schemas/{kind.name}Object"}
    responses = operation["responses"]
    if method == "get" and not one:
        listing = {
            "type": "object",
            "required": ["items"],
            "properties": {"items": {"type": "array", "items": ref}},
            "additionalProperties": False,
        }
        responses["200"] = _json(f"every {kind.name}", listing)
    elif method == "post" and not one:
        created = ref
        if kind.name in CREATE_EXTRAS:
            created = {"$ref": f"#/components/schemas/{kind.name}Created"}
        responses["201"] = _json(f"the created {kind.name}", created)
    elif method in ("get", "patch") and one:
        responses["200"] = _json(f"the {kind.name}", ref)


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
