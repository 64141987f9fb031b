"""The chart meets real Helm (v4's Go library via helm-python-sdk, offline) and kubernetes-validate.

* Helm renders every example exactly as committed (blank lines and document order aside);
* every render passes kubernetes-validate --strict at the chart's kubeVersion floor and the newest
  Kubernetes it knows; `helm lint` finds nothing for the defaults or any example;
* Helm refuses each bad combination of values (the schema or a template `fail`), and accepts the
  edge cases that must keep working;
* a `helm upgrade` renders the pre-upgrade migration Job without service links: with them,
  Kubernetes would add RELAY_PORT=tcp://... and `relay migrate` would exit 1 on it.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from relay.config import ConfigError, Settings, load_settings, unknown_variables
from tests.integration.deploy.deploy_helpers import CHART, COMBOS, EXAMPLES, env_of
from tests.integration.deploy.helm_render import comparable, example_values, render, split_documents, template

# The chart's kubeVersion floor and the newest release kubernetes-validate ships schemas for.
K8S_VERSIONS = ("1.25.0", "1.37.0")
# Custom resources: not in the Kubernetes schemas, checked field by field in test_deploy_helm_extras.py.
CRD_KINDS = {"ServiceMonitor", "HTTPRoute"}
# RELAY_BATCH_PAYLOAD_STORE (SPEC §10.7) is read by Relay once the database payload store lands (the
# chart passes it already); until then it is the one name Relay's boot check does not know.
NOT_YET_READ = set() if "batch_payload_store" in Settings.model_fields else {"RELAY_BATCH_PAYLOAD_STORE"}
MASTER_KEY = base64.b64encode(bytes(range(32))).decode()
POSTGRES = {
    "secrets": {
        "databaseUrl": "postgresql://relay:pw@postgres:5432/relay",
        "masterKey": MASTER_KEY,
        "adminToken": "an-admin-token-of-some-length",
    }
}


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".yaml"):
            docs += [yaml.safe_load(body) for _, body in split_documents(text)]
    return [d for d in docs if d]


def with_postgres(override: dict[str, Any]) -> dict[str, Any]:
    values = copy.deepcopy(POSTGRES)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    return {combo: template(example_values(combo)) for combo in COMBOS}


# ---------------------------------------------------------------------------------------------
# render, validate, lint


@pytest.mark.parametrize("combo", COMBOS)
def test_helm_renders_the_committed_example(combo: str, templates: dict[str, str]) -> None:
    committed = (EXAMPLES / f"{combo}.yaml").read_text(encoding="utf-8")
    assert comparable(templates[combo]) == comparable(committed), (
        f"examples/{combo}.yaml is not what Helm renders: regenerate with "
        "`.venv/bin/python -m tests.integration.deploy.helm_render` and review the diff"
    )


@pytest.mark.parametrize("combo", COMBOS)
def test_every_render_passes_kubernetes_validate_strict(combo: str, templates: dict[str, str]) -> None:
    docs = [yaml.safe_load(body) for _, body in split_documents(templates[combo])]
    assert docs, f"{combo}: Helm rendered nothing"
    failures = []
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                failures.append(f"{doc['kind']}/{doc['metadata']['name']} @ {version}: {path}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                failures.append(f"{doc['kind']}/{doc['metadata']['name']} @ {version}: {exc.message}")
    assert not failures, f"{combo}:\n" + "\n".join(failures)


def test_strict_validation_catches_an_unknown_field() -> None:
    """Control: the validator used above does reject a misspelt field."""
    (deployment,) = [d for d in documents(render()) if d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"path": "/livez"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("combo", COMBOS)
def test_helm_lint_is_clean(combo: str) -> None:
    report = helm.lint(CHART, example_values(combo), strict=True, namespace="default")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 = warning, 3 = error
    assert report["errors"] == [] and problems == [], f"helm lint ({combo}): {report}"


def test_helm_lint_reports_a_broken_value() -> None:
    """Control: lint does see schema violations."""
    report = helm.lint(CHART, {"replicaCount": "three"}, strict=True, namespace="default")
    assert any(m["severity"] == 3 for m in report["messages"]), report


# ---------------------------------------------------------------------------------------------
# bad combinations: (values, a fragment of Helm's message)

RWO_CLAIM = {
    "mode": "persistentVolumeClaim",
    "persistentVolumeClaim": {"size": "10Gi", "accessModes": ["ReadWriteOnce"]},
}
BAD_VALUES = [
    pytest.param({"replicaCount": -1}, "/replicaCount", id="negative-replicaCount"),
    pytest.param({"replicaCount": "3"}, "/replicaCount", id="string-replicaCount"),
    pytest.param({"replicas": 3}, "replicas", id="unknown-top-level-key"),
    pytest.param({"batchPayloads": {"mode": "emptyDir"}}, "batchPayloads", id="old-batchPayloads-key"),
    pytest.param({"image": {"repository": ""}}, "/image/repository", id="empty-image-repository"),
    pytest.param({"payloads": {"mode": "hostPath"}}, "/payloads/mode", id="unknown-mode"),
    pytest.param({"payloads": {"store": "s3"}}, "/payloads/store", id="unknown-store"),
    pytest.param(
        {"payloads": {"mode": "persistentVolumeClaim"}},
        "/payloads/persistentVolumeClaim",
        id="claim-without-size-or-existingClaim",
    ),
    pytest.param(
        {"payloads": {"mode": "persistentVolumeClaim", "persistentVolumeClaim": {"size": "lots"}}},
        "/payloads/persistentVolumeClaim/size",
        id="claim-size-not-a-quantity",
    ),
    pytest.param(
        {"payloads": {"persistentVolumeClaim": {"storageClass": "nfs"}}},
        "storageClass",
        id="typo-in-claim-key",
    ),
    pytest.param(
        {"payloads": {"persistentVolumeClaim": {"accessModes": ["ReadOnlyMany"]}}},
        "/payloads/persistentVolumeClaim/accessModes/0",
        id="read-only-access-mode",
    ),
    pytest.param({"payloads": {"mountPath": "payloads"}}, "/payloads/mountPath", id="relative-mountPath"),
    pytest.param({"replicaCount": 3}, "/secrets", id="replicas-without-postgres"),
    pytest.param(
        {"autoscaling": {"enabled": True}, "payloads": {"store": "database"}},
        "need Postgres",
        id="autoscaler-without-postgres",
    ),
    pytest.param(
        with_postgres({"replicaCount": 3}), "/payloads/mode", id="replicas-running-items-on-pod-local-files"
    ),
    pytest.param(
        with_postgres({"autoscaling": {"enabled": True}}),
        "payloads.store=database",
        id="autoscaler-running-items-on-pod-local-files",
    ),
    pytest.param(
        with_postgres({"replicaCount": 3, "payloads": RWO_CLAIM, "strategy": {"type": "Recreate"}}),
        "/payloads/persistentVolumeClaim/accessModes",
        id="replicas-on-a-readwriteonce-claim",
    ),
    pytest.param(
        with_postgres(
            {
                "autoscaling": {"enabled": True},
                "payloads": {**RWO_CLAIM, "store": "database"},
                "strategy": {"type": "Recreate"},
            }
        ),
        "without ReadWriteMany",
        id="autoscaler-on-a-readwriteonce-claim",
    ),
    pytest.param(
        with_postgres({"payloads": RWO_CLAIM}),
        "strategy.type=Recreate",
        id="readwriteonce-claim-rolling-update",
    ),
    pytest.param(
        {"secrets": {"databaseUrl": "mysql://relay@db/relay", "masterKey": MASTER_KEY}},
        "/secrets/databaseUrl",
        id="not-a-postgres-url",
    ),
    pytest.param(
        {
            "secrets": {
                "databaseUrl": "postgresql://relay@db/relay",
                "adminToken": "an-admin-token-of-some-length",
            }
        },
        "/secrets/masterKey",
        id="postgres-without-master-key",
    ),
    pytest.param(
        {"secrets": {"databaseUrl": "postgresql://relay@db/relay", "masterKey": MASTER_KEY}},
        "/secrets/adminToken",
        id="postgres-without-admin-token",
    ),
    pytest.param({"secrets": {"masterKey": "not-base64"}}, "/secrets/masterKey", id="bad-master-key"),
    pytest.param({"secrets": {"adminToken": "short"}}, "/secrets/adminToken", id="short-admin-token"),
    pytest.param(
        {"secrets": {"existingSecret": "relay-secrets", "adminToken": "an-admin-token-of-some-length"}},
        "/secrets/adminToken",
        id="existingSecret-and-values",
    ),
    pytest.param({"config": {"logLevel": "verbose"}}, "/config/logLevel", id="unknown-log-level"),
    pytest.param({"config": {"batchWorkers": -1}}, "/config/batchWorkers", id="negative-workers"),
    pytest.param({"config": {"shutdownGraceS": "30s"}}, "/config/shutdownGraceS", id="grace-not-int"),
    pytest.param({"config": {"batchRescueAfterS": 300}}, "batchRescueAfterS", id="rescue-not-after-timeout"),
    pytest.param({"service": {"port": 70000}}, "/service/port", id="port-out-of-range"),
    pytest.param({"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval", id="bad-interval"),
    pytest.param(
        {"migrations": {"hookDeletePolicy": "never"}}, "/migrations/hookDeletePolicy", id="bad-hook-policy"
    ),
    pytest.param(
        with_postgres({"migrations": {"activeDeadlineSeconds": 600}}),
        "helmTimeoutSeconds",
        id="job-deadline-over-helm-timeout",
    ),
    pytest.param({"strategy": {"type": "BlueGreen"}}, "/strategy/type", id="unknown-strategy"),
    pytest.param(
        {"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}},
        "/strategy",
        id="recreate-with-rollingUpdate",
    ),
    pytest.param({"extraEnv": [{"value": "x"}]}, "/extraEnv/0", id="extraEnv-without-name"),
    pytest.param(
        {"extraEnv": [{"name": "RELAY_PORT", "value": "9000"}]}, "/extraEnv/0/name", id="extraEnv-chart-owned"
    ),
    pytest.param(
        {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]},
        "/extraVolumes/0/name",
        id="extraVolume-name-clash",
    ),
    pytest.param({"extraVolumeMounts": [{"name": "ca"}]}, "/extraVolumeMounts/0", id="mount-without-path"),
    pytest.param(
        {"podDisruptionBudget": {"minAvailable": 1}}, "/podDisruptionBudget", id="pdb-with-both-bounds"
    ),
    pytest.param(
        {"podDisruptionBudget": {"maxUnavailable": ""}}, "/podDisruptionBudget", id="pdb-with-no-bound"
    ),
    pytest.param(
        {"podDisruptionBudget": {"maxUnavailable": "", "minAvailable": 1}},
        "blocks every node drain",
        id="pdb-blocking-drains",
    ),
    pytest.param(
        {"podDisruptionBudget": {"maxUnavailable": "half"}},
        "/podDisruptionBudget/maxUnavailable",
        id="pdb-bad-percentage",
    ),
    pytest.param(
        with_postgres(
            {
                "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 3},
                "payloads": {"store": "database"},
            }
        ),
        "minReplicas",
        id="autoscaler-min-over-max",
    ),
    pytest.param(
        with_postgres(
            {
                "autoscaling": {"enabled": True, "targetCPUUtilizationPercentage": 0},
                "payloads": {"store": "database"},
            }
        ),
        "/autoscaling",
        id="autoscaler-without-target",
    ),
    pytest.param({"ingress": {"enabled": True, "hosts": []}}, "/ingress", id="ingress-without-hosts"),
    pytest.param(
        {"ingress": {"hosts": [{"host": "a.example", "paths": [{"path": "/", "pathType": "Regex"}]}]}},
        "/ingress/hosts/0/paths/0/pathType",
        id="ingress-bad-pathType",
    ),
    pytest.param({"httpRoute": {"enabled": True}}, "/httpRoute", id="httpRoute-without-parent"),
    pytest.param(
        {"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled", id="networkPolicy-not-bool"
    ),
    pytest.param({"tests": {"enable": True}}, "enable", id="typo-in-tests"),
]


@pytest.mark.parametrize(("values", "fragment"), BAD_VALUES)
def test_helm_refuses_bad_values(values: dict[str, Any], fragment: str) -> None:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as caught:
        render(values)
    assert fragment in str(caught.value), f"Helm refused {values}, but not for {fragment!r}:\n{caught.value}"


GOOD_EDGE_VALUES = [
    pytest.param({"replicaCount": 0}, id="zero-replicas"),
    pytest.param(
        {
            "replicaCount": 3,
            "secrets": {"existingSecret": "relay-secrets"},
            "payloads": {"store": "database"},
        },
        id="replicas-with-database-store-and-emptyDir",
    ),
    pytest.param(
        with_postgres({"replicaCount": 3, "config": {"batchWorkers": 0}}),
        id="replicas-without-workers-on-emptyDir",
    ),
    pytest.param(
        {
            "replicaCount": 4,
            "secrets": {"existingSecret": "relay-secrets"},
            "payloads": {
                "mode": "persistentVolumeClaim",
                "persistentVolumeClaim": {"existingClaim": "shared"},
            },
        },
        id="replicas-on-existing-claim",
    ),
    pytest.param(
        with_postgres({"replicaCount": 1, "payloads": RWO_CLAIM, "strategy": {"type": "Recreate"}}),
        id="one-replica-on-a-readwriteonce-claim",
    ),
    pytest.param(
        {
            "payloads": {
                "mode": "persistentVolumeClaim",
                "persistentVolumeClaim": {"size": "1.5Ti", "storageClassName": "-"},
            }
        },
        id="claim-with-empty-storage-class",
    ),
    pytest.param({"payloads": {"emptyDir": {"sizeLimit": "20Gi"}}}, id="emptyDir-size-limit"),
    pytest.param({"payloads": {"store": "database"}}, id="database-store-on-embedded-sqlite"),
    pytest.param({"config": {"batchWorkers": 0}, "migrations": {"enabled": False}}, id="no-workers-no-job"),
    pytest.param(
        with_postgres({"migrations": {"activeDeadlineSeconds": 1100, "helmTimeoutSeconds": 1200}}),
        id="long-migration-with-a-longer-helm-timeout",
    ),
    pytest.param({"podDisruptionBudget": {"maxUnavailable": "", "minAvailable": "50%"}}, id="pdb-percentage"),
    pytest.param({"podDisruptionBudget": {"enabled": False}}, id="no-pdb"),
    pytest.param({"extraEnv": [{"name": "RELAY_MIGRATE_ON_BOOT", "value": "false"}]}, id="extraEnv-own-name"),
    pytest.param({"tests": {"enabled": False}}, id="no-helm-test"),
    pytest.param({"global": {"imageRegistry": "x"}}, id="helm-global-values"),
]


@pytest.mark.parametrize("values", GOOD_EDGE_VALUES)
def test_helm_accepts_edge_values(values: dict[str, Any]) -> None:
    docs = documents(render(values))
    assert any(d["kind"] == "Deployment" for d in docs)
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


# ---------------------------------------------------------------------------------------------
# helm upgrade: the migration Job without service links


def service_links(services: list[dict[str, Any]]) -> dict[str, str]:
    """The variables the kubelet adds to a pod with enableServiceLinks (the Kubernetes default) for
    each Service of its namespace (pkg/kubelet/envvars: docker-link style names)."""
    env: dict[str, str] = {}
    for index, service in enumerate(services):
        name = service["metadata"]["name"].upper().replace("-", "_")
        host = f"10.96.0.{10 + index}"
        ports = service["spec"]["ports"]
        env[f"{name}_SERVICE_HOST"] = host
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        env[f"{name}_PORT"] = f"tcp://{host}:{ports[0]['port']}"
        for port in ports:
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
            prefix = f"{name}_PORT_{port['port']}_TCP"
            env |= {
                prefix: f"tcp://{host}:{port['port']}",
                f"{prefix}_PROTO": "tcp",
                f"{prefix}_PORT": str(port["port"]),
                f"{prefix}_ADDR": host,
            }
    return env


def pod_env(container: dict[str, Any], secret: dict[str, str], links: dict[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: service links, then envFrom, then env."""
    env = dict(links)
    env |= secret
    env |= {k: v for k, v in env_of(container).items() if isinstance(v, str)}
    env["RELAY_INSTANCE_ID"] = "relay-migrate-x7k2p"
    return env


def test_upgrade_renders_the_migration_job_without_service_links() -> None:
    values = example_values("shared-volume")
    docs = documents(render(values, is_install=False, is_upgrade=True, revision=2))
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"]
    pod = job["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    (container,) = pod["containers"]
    (hook_secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "relay-migrate"]
    secret = {k: base64.b64decode(v).decode() for k, v in hook_secret["data"].items()}
    links = service_links([d for d in docs if d["kind"] == "Service"])
    assert "RELAY_PORT" in links and "RELAY_CONTROL_PORT" in links, "the release's Services are named relay*"

    # As rendered (no links): `relay migrate` accepts its environment, and nothing looks like a typo.
    env = pod_env(container, secret, {})
    settings = load_settings(env)
    assert settings.is_postgres and settings.port == 8080
    assert unknown_variables(env) == []

    # What enableServiceLinks=false prevents: with the links the migration fails on RELAY_PORT.
    with pytest.raises(ConfigError, match="RELAY_PORT"):
        load_settings(pod_env(container, secret, links))


def test_server_pods_get_no_false_typo_warnings() -> None:
    """With service links the server pods would log 14 'unknown RELAY_* (typo?)' warnings."""
    docs = documents(render(example_values("shared-volume")))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (secret_doc,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "relay"]
    secret = {k: base64.b64decode(v).decode() for k, v in secret_doc["data"].items()}
    assert set(unknown_variables(pod_env(container, secret, {}))) == NOT_YET_READ
    links = service_links([d for d in docs if d["kind"] == "Service"])
    assert len(set(unknown_variables(pod_env(container, secret, links))) - NOT_YET_READ) == 14


# ---------------------------------------------------------------------------------------------
# NOTES


def notes(values: dict[str, Any]) -> str:
    return render(values)["relay/templates/NOTES.txt"]


def test_notes_say_metrics_needs_no_bearer() -> None:
    text = notes({})
    assert "/metrics needs no bearer" in text
    assert "/metrics; bearer" not in text
    assert "helm test relay" in text


def test_notes_name_the_payload_store() -> None:
    assert "payloads.store=database (request and response bodies in the database" in notes(
        example_values("database-store")
    )
    text = notes(example_values("stateless-replicas"))
    assert "payloads.store=files" in text and "Route every /v1/batches request" in text
    assert "WARNING" not in notes(example_values("shared-volume"))
