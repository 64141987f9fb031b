"""The dashboard's edit forms as data (SPEC §16 "operators can create, edit and delete every catalog
kind of §2 through forms that validate as the API does"): for each kind, which fields its form shows
and how a posted form becomes the JSON body ``/api/<plural>`` would receive.

Why a table and no validation here: the form only translates (a checkbox to a bool, a comma list to a
list, a JSON text area to an object); the body then goes to the same ``CatalogService`` call as the
API's, so the rules, the messages (``field: problem``) and the 400/422 statuses are the API's own.
The one check of its own is that a JSON text area holds JSON; its error names the field the same way.

Write-only fields (passwords, host-key values, webhook secrets) are ``secret`` widgets: always shown
empty, sent only when filled in, so editing anything else keeps the stored value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from relay.errors import InvalidRequest

OMIT: Final = object()  # a blank field is left out of the body (a patch keeps the current value)


@dataclass(frozen=True)
class Field:
    """One input of a kind's form. ``widget``: ``text``, ``bool`` (checkbox), ``list`` (comma or
    newline separated), ``json`` (text area), ``secret`` (write-only), ``choice`` (a select of
    ``choices``) or ``ref`` (a name, offered from ``ref`` kind's objects). ``blank`` is what an empty
    input sends (None clears an optional field; :data:`OMIT` leaves it out)."""

    name: str
    label: str
    widget: str = "text"
    blank: Any = None
    choices: tuple[str, ...] = ()
    ref: str | None = None  # the plural whose names a ``ref`` or ``list`` field offers
    hint: str = ""


def _on(name: str = "enabled", label: str = "Enabled") -> Field:
    return Field(name, label, "bool")


ADAPTERS: Final = ("openai", "anthropic", "openai_responses")
PRICING_HINT: Final = '{"input": 1.0, "output": 2.0}'
BATCH_HINT: Final = '{"pacing": "wait", "live_reserve": 0.2}'
KEY_SELECTIONS: Final = ("prioritized", "round_robin", "least_recently_used")

#: Each catalog kind's form (besides ``name``, which every kind has), by its API plural.
FORMS: Final[Mapping[str, tuple[Field, ...]]] = {
    "teams": (Field("display_name", "Display name", blank=""),),
    "projects": (
        Field("team", "Team", "ref", ref="teams"),
        Field("default_policy", "Default policy", "ref", ref="policies"),
        _on(),
    ),
    "service-accounts": (
        Field("project", "Project", "ref", ref="projects"),
        Field("policy", "Policy", "ref", ref="policies"),
        _on(),
    ),
    "users": (
        Field("email", "Email"),
        Field("password", "Password (leave empty to keep)", "secret", blank=OMIT),
        _on(),
        Field(
            "memberships",
            "Memberships (JSON)",
            "json",
            blank=[],
            hint='[{"project": "p", "policy": null}]',
        ),
    ),
    "hosts": (
        Field("base_url", "Base URL"),
        Field("breaker", "Breaker (JSON)", "json", hint='{"threshold": 5, "window_s": 10, "max_open_s": 60}'),
        _on(),
    ),
    "host-keys": (
        Field("host", "Host", "ref", ref="hosts"),
        Field("value", "Value (write-only, leave empty to keep)", "secret", blank=OMIT),
        Field("value_from_env", "Or read from environment variable", blank=OMIT),
        _on(),
    ),
    "models": (
        Field("provider", "Provider"),
        Field("aliases", "Aliases (comma separated)", "list"),
        _on(),
    ),
    "bindings": (
        Field("model", "Model", "ref", ref="models"),
        Field("host", "Host", "ref", ref="hosts"),
        Field("adapter", "Adapter", "choice", choices=ADAPTERS),
        Field("upstream_name", "Upstream name"),
        Field("pricing", "Pricing (JSON, USD per million tokens)", "json", hint=PRICING_HINT),
        _on(),
    ),
    "policies": (
        Field("models", "Models granted (comma separated)", "list", hint="*, openai/*, gpt-4o@host"),
        Field("host_keys", "Host-key pool, in order (comma separated)", "list", ref="host-keys"),
        Field("key_selection", "Key selection", "choice", choices=KEY_SELECTIONS),
        Field(
            "rate_limit",
            "Rate limits and budgets (JSON)",
            "json",
            blank={"rules": []},
            hint='{"rules": [{"meter": "requests", "limit": 60, "window": "1m"}]}',
        ),
        Field("fallbacks", "Fallbacks (JSON)", "json", blank={}, hint='{"model-a": ["model-b"]}'),
        Field("batch", "Batch block (JSON)", "json", blank={}, hint=BATCH_HINT),
        Field("cache", "Cache block (JSON)", "json", hint='{"ttl": "1h", "scope": "project"}'),
        Field("guardrails", "Guardrails, in order (comma separated)", "list", ref="guardrails"),
        _on("payload_logging", "Log payloads"),
        _on(),
    ),
    "guardrails": (
        Field("stage", "Stage", "choice", choices=("input", "output")),
        Field("action", "Action (a webhook's answer decides its own)", "choice", choices=("block", "redact")),
        # One matcher of three; the two left empty are sent as null, so switching matcher clears the old.
        Field("regex", "Regex patterns (JSON list)", "json", hint='["sk-[A-Za-z0-9]{20,}"]'),
        Field("pii", "PII types (JSON list)", "json", hint='["email", "phone", "credit_card"]'),
        Field(
            "webhook",
            "Webhook (JSON)",
            "json",
            hint='{"url": "https://…", "timeout_ms": 1000, "fail": "closed"}',
        ),
        Field("message", "Message shown on a block", blank=""),
    ),
    "webhooks": (
        Field("project", "Project (empty: every project)", "ref", ref="projects"),
        Field("url", "URL"),
        Field("secret", "Secret (write-only; empty: generated, or kept)", "secret", blank=OMIT),
        Field("events", "Events (comma separated; empty: every event)", "list", blank=OMIT),
        _on(),
    ),
}

#: The kinds' headings, singular and plural, in the order the editor lists them.
TITLES: Final[Mapping[str, tuple[str, str]]] = {
    "teams": ("Team", "Teams"),
    "projects": ("Project", "Projects"),
    "service-accounts": ("Service account", "Service accounts"),
    "users": ("User", "Users"),
    "hosts": ("Host", "Hosts"),
    "host-keys": ("Host key", "Host keys"),
    "models": ("Model", "Models"),
    "bindings": ("Binding", "Bindings"),
    "guardrails": ("Guardrail", "Guardrails"),
    "policies": ("Policy", "Policies"),
    "webhooks": ("Webhook", "Webhooks"),
}


def body_of(plural: str, posted: Mapping[str, str]) -> dict[str, Any]:
    """The API body a posted form stands for: every field of the kind's form (a missing checkbox is
    false), blanks as the field says; a JSON area that is not JSON answers 400 naming the field."""
    body: dict[str, Any] = {"name": posted.get("name", "").strip()}
    for field in FORMS[plural]:
        raw = posted.get(field.name, "")
        if field.widget == "bool":
            body[field.name] = raw == "on"
            continue
        if field.widget != "secret":
            raw = raw.strip()
        if raw == "":
            if field.blank is not OMIT:
                body[field.name] = [] if field.widget == "list" and field.blank is None else field.blank
            continue
        if field.widget == "list":
            body[field.name] = [part.strip() for part in raw.replace("\n", ",").split(",") if part.strip()]
        elif field.widget == "json":
            try:
                body[field.name] = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"{field.name}: not valid JSON ({exc.msg})") from None
        else:
            body[field.name] = raw
    return body


def shown(plural: str, current: Mapping[str, Any]) -> dict[str, str]:
    """An object (as the API renders it) as form values; secrets stay empty."""
    values = {"name": str(current.get("name") or "")}
    for field in FORMS[plural]:
        value = current.get(field.name)
        if field.widget == "secret" or value is None:
            values[field.name] = ""
        elif field.widget == "bool":
            values[field.name] = "on" if value else ""
        elif field.widget == "list":
            values[field.name] = ", ".join(str(v) for v in value)
        elif field.widget == "json":
            value = _as_written(value)
            values[field.name] = json.dumps(value, indent=2) if value not in ({}, [], {"rules": []}) else ""
        else:
            values[field.name] = str(value)
    return values


def _as_written(value: Any) -> Any:
    """A rendered value as a body would write it: the API renders each reference inside a list
    (a membership's ``project``) with its ``project_id`` beside it, which a write refuses."""
    if not isinstance(value, list):
        return value  # a mapping's keys are the caller's own (fallbacks by model name): kept as they are
    return [
        {k: v for k, v in item.items() if not (k.endswith("_id") and k.removesuffix("_id") in item)}
        if isinstance(item, dict)
        else item
        for item in value
    ]


def echoed(plural: str, posted: Mapping[str, str]) -> dict[str, str]:
    """What the user typed, to re-show next to an error (never a secret they typed)."""
    secrets = {f.name for f in FORMS[plural] if f.widget == "secret"}
    return {k: ("" if k in secrets else v) for k, v in posted.items() if k != "csrf"}
