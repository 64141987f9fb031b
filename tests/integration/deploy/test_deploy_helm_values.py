"""values.yaml, values.schema.json, the chart README's values table and the templates agree."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import yaml

from tests.integration.deploy.deploy_helpers import CHART, COMBOS, EXAMPLES, chart_defaults, values_schema


def is_passthrough(node: dict[str, Any]) -> bool:
    """A schema node that takes a Kubernetes object or a free map as-is (no declared properties)."""
    return "properties" not in node


def values_leaf_paths(values: Any, prefix: str = "") -> list[str]:
    if isinstance(values, dict) and values:
        paths: list[str] = []
        for key, sub in values.items():
            paths += values_leaf_paths(sub, f"{prefix}.{key}" if prefix else key)
        return paths
    return [prefix]


def documented_prefix(path: str) -> str:
    """The key under which a values path is documented: itself, or its pass-through ancestor."""
    node = values_schema()
    parts = path.split(".")
    for i, part in enumerate(parts):
        assert "properties" in node and part in node["properties"], (
            f"values.yaml key {path!r}: {'.'.join(parts[: i + 1])!r} is not declared in values.schema.json"
        )
        node = node["properties"][part]
        if is_passthrough(node):
            return ".".join(parts[: i + 1])
    return path


def test_schema_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(values_schema())


# ---------------------------------------------------------------------------------------------
# values.yaml / schema / README / templates agree


def test_every_value_is_in_the_schema_and_the_readme() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert "\n## Values\n" in readme, "the chart README has no '## Values' section"
    values_section = readme.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    table_keys = re.findall(r"^\| `([^`]+)` \|", values_section, flags=re.M)
    assert len(table_keys) == len(set(table_keys)), "duplicate rows in the README values table"
    documented = {documented_prefix(p) for p in values_leaf_paths(chart_defaults())}
    missing = sorted(documented - set(table_keys))
    stale = sorted(set(table_keys) - documented)
    assert not missing, f"values missing from the README values table: {missing}"
    assert not stale, f"README values table lists keys that values.yaml does not have: {stale}"


def test_every_schema_property_has_a_default() -> None:
    defaults = chart_defaults()
    allowed_without_default = {"global", "strategy.type", "strategy.rollingUpdate"}

    def walk(node: dict[str, Any], values: Any, prefix: str) -> list[str]:
        missing = []
        for key, sub in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            if path in allowed_without_default:
                continue
            if not isinstance(values, dict) or key not in values:
                missing.append(path)
            else:
                missing += walk(sub, values[key], path)
        return missing

    assert walk(values_schema(), defaults, "") == [], "schema properties with no default in values.yaml"


def test_templates_only_reference_existing_values() -> None:
    defaults = chart_defaults()
    problems = []
    for template in sorted(p for p in (CHART / "templates").rglob("*") if p.is_file()):
        text = template.read_text(encoding="utf-8")
        for ref in sorted(set(re.findall(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", text))):
            node: Any = defaults
            for part in ref.strip(".").split("."):
                if not isinstance(node, dict) or part not in node:
                    problems.append(f"{template.name}: .Values{ref}")
                    break
                node = node[part]
    assert not problems, f"templates reference values that values.yaml does not define: {problems}"


def test_values_schema_json_is_formatted() -> None:
    text = (CHART / "values.schema.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n", (
        "values.schema.json: keep it as json.dumps(indent=2) output so diffs stay readable"
    )


def test_example_values_files_parse_as_mappings() -> None:
    for combo in COMBOS:
        data = yaml.safe_load((EXAMPLES / f"{combo}.values.yaml").read_text(encoding="utf-8"))
        assert isinstance(data, dict), f"examples/{combo}.values.yaml must be a mapping (use {{}} for none)"
