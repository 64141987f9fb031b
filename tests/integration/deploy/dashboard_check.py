"""What the Grafana dashboard test checks, as functions a test can feed any dashboard and any scrape:
the metric names a PromQL expression queries, the series names a ``/metrics`` text can export, and the
structural rules a Grafana dashboard JSON model must follow to import.

Series names come from prometheus_client's own text parser, by family type, so a labelled family with
no child yet (``# HELP``/``# TYPE`` only) still counts as exported: a dashboard query names the family,
and a family that exists but has not counted anything yet is not a rename.
"""

from __future__ import annotations

import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: The series each family type exports beside (or instead of) the family name itself.
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
}

#: PromQL words that look like names but are not metrics (aggregation modifiers, set operators …).
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_BRACES = re.compile(r"\{[^}]*\}")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*[a-zA-Z_]\w*\s*\)")
_NAME = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def exported_series(metrics_text: str) -> set[str]:
    """Every series name a ``/metrics`` exposition can hold: each family's name and its type's
    suffixed names (a counter ``x`` exports ``x_total``, a histogram ``x_bucket``/``x_count``/``x_sum``)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def queried_metrics(expr: str) -> set[str]:
    """The metric names one PromQL expression selects: strings, Grafana variables, label matchers,
    label lists, range selectors, numbers and function names are removed before names are read."""
    text = _STRING.sub(" ", expr)
    text = _VARIABLE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    found = set()
    for match in _NAME.finditer(text):
        name, call = match.group(1), match.group(2)
        if call is None and name not in _KEYWORDS:
            found.add(name)
    return found


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every query target, rows' nested panels included, and of every query variable
    (``label_values(<selector>, <label>)``: its selector, the label is not a metric)."""
    found = []
    for panel in _all_panels(dashboard):
        for target in panel.get("targets", []):
            found.append((panel.get("title", ""), target.get("expr", "")))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        label_values = _LABEL_VALUES.fullmatch(text.strip())
        found.append((f"variable {variable.get('name')}", label_values.group(1) if label_values else text))
    return found


def missing_metrics(dashboard: dict[str, Any], metrics_text: str) -> list[str]:
    """``panel: metric`` for every metric the dashboard queries that the scrape cannot export."""
    exported = exported_series(metrics_text)
    return sorted(
        f"{title}: {name}"
        for title, expr in dashboard_exprs(dashboard)
        for name in queried_metrics(expr)
        if name not in exported
    )


def structure_problems(dashboard: dict[str, Any]) -> list[str]:
    """What keeps the JSON from being a dashboard Grafana imports and renders as meant: a title and
    panels, unique panel ids, a gridPos on every panel, a datasource and at least one target with a
    non-empty expr on every panel that is not a row, and the ``datasource`` variable the panels name."""
    problems: list[str] = []
    if not dashboard.get("title"):
        problems.append("dashboard has no title")
    panels = _all_panels(dashboard)
    if not panels:
        problems.append("dashboard has no panels")
    seen: set[Any] = set()
    for panel in panels:
        label = f"panel {panel.get('id')!r} ({panel.get('title', '')!r})"
        if panel.get("id") is None or panel["id"] in seen:
            problems.append(f"{label}: missing or repeated id")
        seen.add(panel.get("id"))
        grid = panel.get("gridPos")
        if not isinstance(grid, dict) or not {"h", "w", "x", "y"} <= set(grid):
            problems.append(f"{label}: no gridPos with h, w, x, y")
        if panel.get("type") == "row":
            continue
        if not panel.get("datasource"):
            problems.append(f"{label}: no datasource")
        targets = panel.get("targets") or []
        if not targets or not all(target.get("expr") for target in targets):
            problems.append(f"{label}: no targets, or a target without an expr")
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    for needed in ("datasource", "job", "instance"):
        if needed not in variables:
            problems.append(f"dashboard has no {needed!r} variable")
    return problems


def _all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels
