"""The shipped price and provider catalog (``catalog.yaml`` in this package): list prices of common
models, the adapter each provider's API speaks, and the day the table was checked.

What it does: loads and validates the table (once per process, by whoever needs it: the control
plane when a binding says ``pricing: from_catalog``, ``relay config`` to show the date) and looks a
model up by name or alias. The prices are copied into the binding when it is written, so the hot path
never reads this table; a newer table changes no binding until that binding is written again.

What it does not know: bindings, the database, HTTP. The file is package data (``pyproject.toml``),
so a wheel or image cannot ship without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any

import yaml

CATALOG_FILE = "catalog.yaml"


@dataclass(frozen=True, slots=True)
class CatalogModel:
    name: str
    provider: str
    adapter: str
    aliases: tuple[str, ...]
    input: float
    output: float
    cached_input: float | None

    def pricing(self) -> dict[str, float | None]:
        """The binding ``pricing`` object (USD per million tokens)."""
        return {"input": self.input, "output": self.output, "cached_input": self.cached_input}


@dataclass(frozen=True, slots=True)
class PriceCatalog:
    date: str  # ISO date the prices were last checked
    providers: dict[str, dict[str, str]]
    models: tuple[CatalogModel, ...]

    def find(self, name: str) -> CatalogModel | None:
        """The entry named ``name`` (or with that alias), ignoring case and surrounding spaces."""
        wanted = name.strip().lower()
        for model in self.models:
            if model.name == wanted or wanted in model.aliases:
                return model
        return None


def _number(entry: dict[str, Any], field: str, *, optional: bool = False) -> float | None:
    value = entry.get(field)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"price catalog: model {entry.get('name')!r}: {field} must be a number >= 0")
    return float(value)


def parse_catalog(document: Any) -> PriceCatalog:
    """Validate a catalog document (the parsed YAML); ValueError naming the bad entry."""
    if not isinstance(document, dict):
        raise ValueError("price catalog: not a mapping")
    checked = document.get("date")
    if isinstance(checked, date):
        checked = checked.isoformat()
    if not isinstance(checked, str):
        raise ValueError("price catalog: date missing")
    providers = document.get("providers") or {}
    models = []
    seen: set[str] = set()
    for entry in document.get("models") or []:
        provider = entry.get("provider")
        if provider not in providers:
            raise ValueError(f"price catalog: model {entry.get('name')!r}: unknown provider {provider!r}")
        names = [str(entry["name"]).lower(), *(str(a).lower() for a in entry.get("aliases", []))]
        if seen.intersection(names):
            raise ValueError(f"price catalog: {sorted(seen.intersection(names))} listed twice")
        seen.update(names)
        models.append(
            CatalogModel(
                name=names[0],
                provider=provider,
                adapter=str(entry.get("adapter") or providers[provider]["adapter"]),
                aliases=tuple(names[1:]),
                input=_number(entry, "input") or 0.0,
                output=_number(entry, "output") or 0.0,
                cached_input=_number(entry, "cached_input", optional=True),
            )
        )
    return PriceCatalog(checked, {k: dict(v) for k, v in providers.items()}, tuple(models))


def load_catalog() -> PriceCatalog:
    """The catalog shipped with this version of Relay."""
    text = resources.files("relay.pricing").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text))
