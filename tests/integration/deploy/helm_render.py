"""The Helm chart rendered by real Helm: Helm v4's Go library through ``helm-python-sdk`` (a dev
dependency), offline, with no helm binary, cluster or network.

``template(values)`` prints what ``helm template relay deploy/helm/relay --namespace default -f …``
prints: the release manifest of a client-only dry-run install, then the hooks. The committed
examples (``examples/<combo>.yaml``) are that output; regenerate them after changing the chart with

    .venv/bin/python -m tests.integration.deploy.helm_render        # or: make chart-examples

(``helm template`` itself gives the same documents, possibly with the hooks in another order).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tests.integration.deploy.deploy_helpers import CHART, COMBOS, EXAMPLES

RELEASE = "relay"
NAMESPACE = "default"
# helm.sh/hook documents are printed after the manifest, in Helm's install order of kinds.
KIND_ORDER = ("Secret", "ConfigMap", "ServiceAccount", "Service", "Pod", "Deployment", "Job")
# A client-only dry run contacts no cluster, but the library wants a kubeconfig to parse.
EMPTY_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def example_values(combo: str) -> dict[str, Any]:
    """An example's values file as Helm's ``-f`` reads it."""
    return helm.values_from_yaml((EXAMPLES / f"{combo}.values.yaml").read_text(encoding="utf-8"))


def render(values: dict[str, Any] | None = None, **options: Any) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included); raises HelmValuesError on a schema
    violation and HelmRenderError on a template ``fail``."""
    options = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True, "revision": 1} | options
    return chart().render(values or {}, **options)


def split_documents(text: str) -> list[tuple[str, str]]:
    """(source template, body) of every YAML document in a rendered stream."""
    out = []
    for chunk in re.split(r"^---\s*$", text, flags=re.M):
        body = chunk.strip("\n")
        if not body.strip():
            continue
        match = re.match(r"# Source: (\S+)\n", body)
        source = match.group(1) if match else ""
        out.append((source, body[match.end() :] if match else body))
    return out


def hooks(rendered: dict[str, str]) -> list[tuple[str, str]]:
    found = []
    for path in sorted(rendered):
        if not path.endswith((".yaml", ".yml")):
            continue
        for _, body in split_documents(rendered[path]):
            doc = yaml.safe_load(body)
            if doc and "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {}):
                found.append((path, body, doc["kind"]))
    order = {kind: i for i, kind in enumerate(KIND_ORDER)}
    found.sort(key=lambda hook: order.get(hook[2], len(order)))
    return [(path, body) for path, body, _ in found]


def template(values: dict[str, Any]) -> str:
    with helm.Config(
        storage_driver="memory", namespace=NAMESPACE, kubeconfig_content=EMPTY_KUBECONFIG
    ) as cfg:
        release = cfg.install(chart(), RELEASE, values, namespace=NAMESPACE, dry_run="client")
    out = release["manifest"].rstrip("\n") + "\n"
    for path, body in hooks(render(values)):
        out += f"---\n# Source: {path}\n{body}\n"
    return out


def comparable(text: str) -> list[str]:
    """The documents of a stream with blank lines dropped, sorted: order and spacing aside, equal."""
    docs = []
    for source, body in split_documents(text):
        lines = [line.rstrip() for line in body.splitlines() if line.strip()]
        docs.append("\n".join([f"# Source: {source}", *lines]))
    return sorted(docs)


def main() -> int:
    for combo in COMBOS:
        target = EXAMPLES / f"{combo}.yaml"
        target.write_text(template(example_values(combo)), encoding="utf-8")
        print(f"wrote {target.relative_to(Path.cwd()) if target.is_relative_to(Path.cwd()) else target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
