"""docs/deployment.md and the chart README cover what the deployment issue asks for."""

from __future__ import annotations

import re

from tests.integration.deploy.deploy_helpers import CHART, REPO

DOC = REPO / "docs" / "deployment.md"


def test_deployment_doc_sections() -> None:
    text = DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    for expected in ("single process", "several replicas", "kubernetes", "upgrading", "sizing"):
        assert any(expected in h.lower() for h in headings), (
            f"docs/deployment.md has no section on {expected}"
        )


def test_deployment_doc_content() -> None:
    text = DOC.read_text(encoding="utf-8")
    for needle in (
        "ReadWriteMany",  # the RWX warning
        "load input: ",  # what happens without a shared directory
        "RELAY_BATCH_WORKERS=0",  # the one-batch-replica alternative
        "docker compose run --rm migrate",  # upgrading with compose
        "pre-upgrade",  # upgrading with helm
        "average request bytes + average response bytes",  # sizing formula
        "helm template relay deploy/helm/relay",  # how the examples are regenerated
    ):
        assert needle in text, f"docs/deployment.md does not mention {needle!r}"


def test_chart_readme_documents_the_regeneration_command() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert "helm template relay deploy/helm/relay --namespace default -f" in readme
    assert "ReadWriteMany" in readme
