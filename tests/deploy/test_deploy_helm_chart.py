"""The Helm chart deploy/helm/relay, checked without Helm or a cluster.

* values.schema.json accepts every documented combination and refuses bad values;
* the rendered examples (examples/<combo>.yaml, what `helm template` prints for
  examples/<combo>.values.yaml) pass kubernetes-validate --strict, and wire the batch payload
  directory, probes, grace period, Services, Secret and migration hook the way the values say;
* values.yaml, values.schema.json, the README's values table and the templates agree.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.deploy_helpers import (
    CHART,
    COMBOS,
    EXAMPLES,
    Rendered,
    chart_defaults,
    combo_values,
    env_of,
    load_yaml,
    merge_values,
    values_schema,
)

# Kubernetes versions the examples are validated against (both ship with kubernetes-validate):
# the chart's kubeVersion floor and a current release.
K8S_VERSIONS = ("1.25.0", "1.30.0")
CHART_META = load_yaml(CHART / "Chart.yaml")
SAMPLE_EXISTING_SECRET = {
    "RELAY_DATABASE_URL": "postgresql://relay:pw@postgres:5432/relay",
    "RELAY_REDIS_URL": "redis://redis:6379/0",
    "RELAY_MASTER_KEY": base64.b64encode(bytes(range(32))).decode(),
    "RELAY_ADMIN_TOKEN": "an-admin-token-of-some-length",
}


# ---------------------------------------------------------------------------------------------
# helpers


def schema_errors(values: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every schema violation as (dotted path, failing keyword, message), nested ones included."""
    validator = jsonschema.Draft7Validator(values_schema())
    out: list[tuple[str, str, str]] = []

    def collect(err: jsonschema.ValidationError) -> None:
        out.append((".".join(str(p) for p in err.absolute_path), str(err.validator), err.message))
        for sub in err.context or []:
            collect(sub)

    for err in validator.iter_errors(values):
        collect(err)
    return out


def database_configured(values: dict[str, Any]) -> bool:
    return bool(values["secrets"]["databaseUrl"] or values["secrets"]["existingSecret"])


def fullname(values: dict[str, Any]) -> str:
    return values["fullnameOverride"] or "relay"


def secret_data(values: dict[str, Any]) -> dict[str, str]:
    names = {
        "databaseUrl": "RELAY_DATABASE_URL",
        "redisUrl": "RELAY_REDIS_URL",
        "masterKey": "RELAY_MASTER_KEY",
        "adminToken": "RELAY_ADMIN_TOKEN",
    }
    return {env: values["secrets"][key] for key, env in names.items() if values["secrets"][key]}


def helm_to_yaml_of_b64(data: dict[str, str]) -> str:
    """What Helm's `toYaml` prints for the Secret data map (sorted keys, trailing newline cut)."""
    if not data:
        return "{}"
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return "\n".join(f"{k}: {encoded[k]}" for k in sorted(encoded))


def container_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
    assert port in by_name, f"port {port!r} is not a named port of container {container['name']}"
    return by_name[port]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


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


# ---------------------------------------------------------------------------------------------
# values.schema.json


def test_schema_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(values_schema())


def test_chart_metadata() -> None:
    assert CHART_META["apiVersion"] == "v2", "Helm 3 chart (apiVersion v2) expected"
    assert CHART_META["name"] == "relay"
    assert CHART_META["type"] == "application"
    assert CHART_META["appVersion"], "appVersion is the default image tag"


def test_every_combination_has_values_and_a_rendered_example() -> None:
    values_files = {p.name[: -len(".values.yaml")] for p in EXAMPLES.glob("*.values.yaml")}
    rendered = {p.stem for p in EXAMPLES.glob("*.yaml") if not p.name.endswith(".values.yaml")}
    assert values_files == set(COMBOS), f"examples/*.values.yaml {sorted(values_files)} != {COMBOS}"
    assert rendered == set(COMBOS), f"examples/*.yaml {sorted(rendered)} != {COMBOS}"


@pytest.mark.parametrize("combo", COMBOS)
def test_example_values_validate(combo: str) -> None:
    errors = schema_errors(combo_values(combo))
    assert not errors, f"examples/{combo}.values.yaml fails values.schema.json: {errors}"


def test_combinations_cover_the_payload_modes() -> None:
    modes = {
        combo: (
            combo_values(combo)["replicaCount"],
            combo_values(combo)["batchPayloads"]["mode"],
            bool(combo_values(combo)["batchPayloads"]["persistentVolumeClaim"]["existingClaim"]),
        )
        for combo in COMBOS
    }
    assert modes["default"] == (1, "emptyDir", False)
    assert modes["shared-volume"] == (3, "persistentVolumeClaim", False)
    assert modes["existing-claim"] == (3, "persistentVolumeClaim", True)
    assert modes["batch-replica"] == (1, "persistentVolumeClaim", False)
    assert any(combo_values(c)["serviceMonitor"]["enabled"] for c in COMBOS), (
        "no example has a ServiceMonitor"
    )


# (override of the default values, dotted path of the expected error, failing JSON-schema keyword)
BAD_VALUES = [
    pytest.param({"replicaCount": -1}, "replicaCount", "minimum", id="negative-replicaCount"),
    pytest.param({"replicaCount": "3"}, "replicaCount", "type", id="string-replicaCount"),
    pytest.param({"replicas": 3}, "", "additionalProperties", id="unknown-top-level-key"),
    pytest.param({"image": {"repository": ""}}, "image.repository", "minLength", id="empty-image-repository"),
    pytest.param({"image": {"repository": None}}, "image", "required", id="missing-image-repository"),
    pytest.param({"batchPayloads": {"mode": "hostPath"}}, "batchPayloads.mode", "enum", id="unknown-mode"),
    pytest.param(
        {"batchPayloads": {"mode": "persistentVolumeClaim"}},
        "batchPayloads.persistentVolumeClaim",
        "anyOf",
        id="claim-without-size-or-existingClaim",
    ),
    pytest.param(
        {"batchPayloads": {"mode": "persistentVolumeClaim", "persistentVolumeClaim": {"size": "lots"}}},
        "batchPayloads.persistentVolumeClaim.size",
        "pattern",
        id="claim-size-not-a-quantity",
    ),
    pytest.param(
        {"batchPayloads": {"persistentVolumeClaim": {"storageClass": "nfs"}}},
        "batchPayloads.persistentVolumeClaim",
        "additionalProperties",
        id="typo-in-claim-key",
    ),
    pytest.param(
        {"batchPayloads": {"persistentVolumeClaim": {"accessModes": ["ReadOnlyMany"]}}},
        "batchPayloads.persistentVolumeClaim.accessModes.0",
        "enum",
        id="read-only-access-mode",
    ),
    pytest.param(
        {"batchPayloads": {"mountPath": "relay-batch-payloads"}},
        "batchPayloads.mountPath",
        "pattern",
        id="relative-mountPath",
    ),
    pytest.param({"replicaCount": 3}, "secrets", "anyOf", id="replicas-without-postgres"),
    pytest.param(
        {
            "replicaCount": 3,
            "secrets": {"existingSecret": "relay-secrets"},
            "batchPayloads": {
                "mode": "persistentVolumeClaim",
                "persistentVolumeClaim": {"size": "10Gi", "accessModes": ["ReadWriteOnce"]},
            },
        },
        "batchPayloads.persistentVolumeClaim.accessModes",
        "contains",
        id="replicas-on-a-readwriteonce-claim",
    ),
    pytest.param(
        {
            "secrets": {
                "databaseUrl": "mysql://relay@db/relay",
                "masterKey": SAMPLE_EXISTING_SECRET["RELAY_MASTER_KEY"],
            }
        },
        "secrets.databaseUrl",
        "pattern",
        id="not-a-postgres-url",
    ),
    pytest.param(
        {"secrets": {"databaseUrl": "postgresql://relay@db/relay"}},
        "secrets.masterKey",
        "minLength",
        id="postgres-without-master-key",
    ),
    pytest.param(
        {"secrets": {"masterKey": "not-base64"}}, "secrets.masterKey", "pattern", id="bad-master-key"
    ),
    pytest.param(
        {"secrets": {"adminToken": "short"}}, "secrets.adminToken", "pattern", id="short-admin-token"
    ),
    pytest.param(
        {"secrets": {"existingSecret": "relay-secrets", "adminToken": "an-admin-token-of-some-length"}},
        "secrets.adminToken",
        "maxLength",
        id="existingSecret-and-values",
    ),
    pytest.param({"config": {"logLevel": "verbose"}}, "config.logLevel", "enum", id="unknown-log-level"),
    pytest.param({"config": {"batchWorkers": -1}}, "config.batchWorkers", "minimum", id="negative-workers"),
    pytest.param({"config": {"shutdownGraceS": "30s"}}, "config.shutdownGraceS", "type", id="grace-not-int"),
    pytest.param({"service": {"port": 70000}}, "service.port", "maximum", id="port-out-of-range"),
    pytest.param(
        {"serviceMonitor": {"interval": "often"}}, "serviceMonitor.interval", "pattern", id="bad-interval"
    ),
    pytest.param(
        {"migrations": {"hookDeletePolicy": "never"}},
        "migrations.hookDeletePolicy",
        "pattern",
        id="bad-hook-policy",
    ),
    pytest.param({"strategy": {"type": "BlueGreen"}}, "strategy.type", "enum", id="unknown-strategy"),
]


@pytest.mark.parametrize(("override", "path", "keyword"), BAD_VALUES)
def test_schema_rejects_bad_values(override: dict[str, Any], path: str, keyword: str) -> None:
    errors = schema_errors(merge_values(chart_defaults(), override))
    assert errors, f"values.schema.json accepted {override}"
    assert any(p == path and k == keyword for p, k, _ in errors), (
        f"expected a {keyword!r} error at {path!r} for {override}, got {errors}"
    )


GOOD_EDGE_VALUES = [
    pytest.param({"replicaCount": 0}, id="scaled-to-zero"),
    pytest.param(
        {
            "replicaCount": 4,
            "secrets": {"existingSecret": "relay-secrets"},
            "batchPayloads": {
                "mode": "persistentVolumeClaim",
                "persistentVolumeClaim": {"existingClaim": "shared"},
            },
        },
        id="replicas-on-existing-claim",
    ),
    pytest.param(
        {
            "batchPayloads": {
                "mode": "persistentVolumeClaim",
                "persistentVolumeClaim": {"size": "1.5Ti", "storageClassName": "-"},
            }
        },
        id="claim-with-empty-storage-class",
    ),
    pytest.param({"batchPayloads": {"emptyDir": {"sizeLimit": "20Gi"}}}, id="emptyDir-size-limit"),
    pytest.param({"config": {"batchWorkers": 0}, "migrations": {"enabled": False}}, id="no-workers-no-job"),
    pytest.param({"global": {"imageRegistry": "x"}}, id="helm-global-values"),
]


@pytest.mark.parametrize("override", GOOD_EDGE_VALUES)
def test_schema_accepts_edge_values(override: dict[str, Any]) -> None:
    errors = schema_errors(merge_values(chart_defaults(), override))
    assert not errors, f"values.schema.json refused {override}: {errors}"


# ---------------------------------------------------------------------------------------------
# rendered examples: Kubernetes schemas


@pytest.mark.parametrize("combo", COMBOS)
def test_example_manifests_pass_kubernetes_validate_strict(combo: str) -> None:
    rendered = Rendered(combo)
    assert rendered.docs, f"{rendered.path.name} is empty"
    failures = []
    for doc in rendered.docs:
        if doc["kind"] == "ServiceMonitor":
            continue  # a CRD: not in the Kubernetes schemas, checked structurally below
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                failures.append(f"{doc['kind']}/{doc['metadata']['name']} @ {version}: {path}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                failures.append(f"{doc['kind']}/{doc['metadata']['name']} @ {version}: {exc.message}")
    assert not failures, f"{rendered.path.name}:\n" + "\n".join(failures)


def test_strict_validation_catches_an_unknown_field() -> None:
    """Control: the validator used above does reject a misspelt field."""
    deployment = copy.deepcopy(Rendered("default").deployment)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"path": "/livez"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("combo", COMBOS)
def test_example_is_helm_template_output(combo: str) -> None:
    """Every document carries Helm's `# Source:` header naming a template that exists."""
    rendered = Rendered(combo)
    chunks = [c for c in re.split(r"^---\n", rendered.text, flags=re.M) if c.strip()]
    assert rendered.text.startswith("---\n# Source: relay/templates/"), (
        f"{rendered.path.name}: not helm template output"
    )
    assert len(chunks) == len(rendered.docs)
    for chunk in chunks:
        first = chunk.splitlines()[0]
        match = re.fullmatch(r"# Source: relay/templates/([\w.-]+\.yaml)", first)
        assert match, f"{rendered.path.name}: document starts with {first!r}, not a # Source header"
        assert (CHART / "templates" / match.group(1)).is_file(), f"{first}: no such template"
    for doc in rendered.docs:
        labels = doc["metadata"]["labels"]
        assert labels["helm.sh/chart"] == f"relay-{CHART_META['version']}", (
            f"{rendered.path.name}: rendered with chart version {labels['helm.sh/chart']}, "
            f"Chart.yaml says {CHART_META['version']}: regenerate the examples"
        )
        assert labels["app.kubernetes.io/version"] == str(CHART_META["appVersion"])
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "relay"


def test_examples_cover_every_template() -> None:
    templates = {
        p.name for p in (CHART / "templates").iterdir() if p.suffix == ".yaml" and not p.name.startswith("_")
    }
    seen = set()
    for combo in COMBOS:
        seen |= set(re.findall(r"^# Source: relay/templates/([\w.-]+)$", Rendered(combo).text, flags=re.M))
    assert templates - seen == set(), f"templates no example renders: {sorted(templates - seen)}"


# ---------------------------------------------------------------------------------------------
# rendered examples: wiring


@pytest.mark.parametrize("combo", COMBOS)
def test_payload_volume_wiring(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    payloads = values["batchPayloads"]
    container = rendered.container
    env = env_of(container)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in rendered.pod_spec["volumes"]}

    assert "batch-payloads" in mounts, "the Relay container does not mount the batch-payloads volume"
    assert env["RELAY_BATCH_PAYLOAD_DIR"] == mounts["batch-payloads"] == payloads["mountPath"], (
        f"RELAY_BATCH_PAYLOAD_DIR {env['RELAY_BATCH_PAYLOAD_DIR']!r} is not the mount path "
        f"{mounts['batch-payloads']!r} (values: {payloads['mountPath']!r})"
    )
    assert Path(env["RELAY_BATCH_PAYLOAD_DIR"]).is_absolute()
    volume = volumes["batch-payloads"]
    claims = rendered.of_kind("PersistentVolumeClaim")

    if payloads["mode"] == "emptyDir":
        assert set(volume) == {"name", "emptyDir"}, f"expected an emptyDir volume, got {volume}"
        assert (volume["emptyDir"] or {}).get("sizeLimit", "") == payloads["emptyDir"]["sizeLimit"]
        assert claims == [], "emptyDir mode must not create a claim"
        assert values["replicaCount"] <= 1, "an example runs several replicas on pod-local payloads"
        return

    spec = payloads["persistentVolumeClaim"]
    assert set(volume) == {"name", "persistentVolumeClaim"}, f"expected a claim volume, got {volume}"
    claim_name = volume["persistentVolumeClaim"]["claimName"]
    if spec["existingClaim"]:
        assert claim_name == spec["existingClaim"]
        assert claims == [], "with existingClaim the chart must not create a claim"
        return
    assert claim_name == f"{fullname(values)}-batch-payloads"
    claim = rendered.one("PersistentVolumeClaim", claim_name)
    assert claim["spec"]["accessModes"] == spec["accessModes"]
    if values["replicaCount"] > 1:
        assert "ReadWriteMany" in claim["spec"]["accessModes"], "several replicas need a ReadWriteMany claim"
    else:
        assert rendered.deployment["spec"].get("strategy", {}).get("type") == "Recreate" or (
            "ReadWriteMany" in claim["spec"]["accessModes"]
        ), "a ReadWriteOnce claim needs the Recreate strategy"
    assert claim["spec"]["resources"]["requests"]["storage"] == spec["size"]
    storage_class = spec["storageClassName"]
    if storage_class == "-":
        assert claim["spec"]["storageClassName"] == ""
    elif storage_class:
        assert claim["spec"]["storageClassName"] == storage_class
    else:
        assert "storageClassName" not in claim["spec"]
    annotations = claim["metadata"].get("annotations") or {}
    assert (annotations.get("helm.sh/resource-policy") == "keep") == bool(spec["keep"])


@pytest.mark.parametrize("combo", COMBOS)
def test_deployment_basics(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    deployment, container = rendered.deployment, rendered.container
    assert deployment["spec"]["replicas"] == values["replicaCount"]
    tag = values["image"]["tag"] or CHART_META["appVersion"]
    assert container["image"] == f"{values['image']['repository']}:{tag}"
    assert container["command"] + container.get("args", []) == ["relay", "serve"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "control": 8081}
    env = env_of(container)
    assert env["RELAY_PORT"] == "8080" and env["RELAY_CONTROL_PORT"] == "8081"
    assert env["RELAY_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}, "instance id = pod name"
    assert env["RELAY_BATCH_WORKERS"] == str(values["config"]["batchWorkers"])
    assert all(isinstance(v, str) for v in env.values() if not isinstance(v, dict)), (
        "env values must be strings"
    )
    security = rendered.pod_spec["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001
    assert rendered.pod_spec["automountServiceAccountToken"] is False
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert labels_match(selector, deployment["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("combo", COMBOS)
def test_graceful_termination_outlasts_the_drain(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    env = env_of(rendered.container)
    grace = int(env["RELAY_SHUTDOWN_GRACE_S"])
    assert grace == values["config"]["shutdownGraceS"]
    pre_stop = rendered.container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    sleep = int(pre_stop[1]) if pre_stop else 0
    assert sleep == values["preStopSleepSeconds"]
    period = rendered.pod_spec["terminationGracePeriodSeconds"]
    assert period > sleep + grace, (
        f"terminationGracePeriodSeconds {period} must exceed "
        f"preStop {sleep}s + RELAY_SHUTDOWN_GRACE_S {grace}s"
    )


@pytest.mark.parametrize("combo", COMBOS)
def test_probes_use_livez_and_healthz_on_8080(combo: str) -> None:
    container = Rendered(combo).container
    expected = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/healthz"}
    for probe, path in expected.items():
        http = container[probe]["httpGet"]
        assert http["path"] == path, f"{probe} checks {http['path']}, expected {path}"
        assert container_port(container, http["port"]) == 8080, f"{probe} is not on the inference port 8080"


@pytest.mark.parametrize("combo", COMBOS)
def test_services_route_to_the_two_planes(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    pod_labels = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    container = rendered.container
    expected = {
        fullname(values): (values["service"]["port"], 8080),
        f"{fullname(values)}-control": (values["controlService"]["port"], 8081),
    }
    services = {s["metadata"]["name"]: s for s in rendered.of_kind("Service")}
    assert set(services) == set(expected)
    job_pod_labels = [j["spec"]["template"]["metadata"]["labels"] for j in rendered.of_kind("Job")]
    for name, (port, target) in expected.items():
        service = services[name]
        assert labels_match(service["spec"]["selector"], pod_labels), f"Service {name} selects no Relay pod"
        for labels in job_pod_labels:
            assert not labels_match(service["spec"]["selector"], labels), (
                f"Service {name} selects the Job pod"
            )
        (service_port,) = service["spec"]["ports"]
        assert service_port["port"] == port
        assert container_port(container, service_port["targetPort"]) == target


@pytest.mark.parametrize("combo", COMBOS)
def test_secret_wiring(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    (env_from,) = rendered.container["envFrom"]
    secret_name = env_from["secretRef"]["name"]
    regular = [
        s
        for s in rendered.of_kind("Secret")
        if "helm.sh/hook" not in (s["metadata"].get("annotations") or {})
    ]
    if values["secrets"]["existingSecret"]:
        assert secret_name == values["secrets"]["existingSecret"]
        assert regular == [], "with existingSecret the chart must not create a Secret"
        return
    assert secret_name == fullname(values)
    (secret,) = regular
    assert secret["metadata"]["name"] == secret_name
    data = secret.get("data") or {}
    decoded = {k: base64.b64decode(v).decode() for k, v in data.items()}
    assert decoded == secret_data(values), "the Secret does not hold the secret values"
    checksum = rendered.deployment["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
    assert checksum == hashlib.sha256(helm_to_yaml_of_b64(secret_data(values)).encode()).hexdigest(), (
        "checksum/secret does not match the Secret data"
    )


@pytest.mark.parametrize("combo", COMBOS)
def test_migration_hook_job(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    env = env_of(rendered.container)
    jobs = rendered.of_kind("Job")
    if not (database_configured(values) and values["migrations"]["enabled"]):
        assert jobs == [], "no migration Job in embedded mode: the pod migrates its own SQLite on boot"
        assert "RELAY_MIGRATE_ON_BOOT" not in env
        return
    (job,) = jobs
    annotations = job["metadata"]["annotations"]
    hooks = {h.strip() for h in annotations["helm.sh/hook"].split(",")}
    assert hooks == {"pre-install", "pre-upgrade"}, f"migration Job hooks: {hooks}"
    assert annotations["helm.sh/hook-delete-policy"] == values["migrations"]["hookDeletePolicy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] + container.get("args", []) == ["relay", "migrate"]
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "migrate"
    assert env["RELAY_MIGRATE_ON_BOOT"] == "false", "pods must not migrate again when the hook Job does"
    (env_from,) = container["envFrom"]
    secret_name = env_from["secretRef"]["name"]
    if values["secrets"]["existingSecret"]:
        assert secret_name == values["secrets"]["existingSecret"]
        return
    # A pre-install hook runs before the release's Secret exists: it needs a hook Secret of its own,
    # created before it (lower weight), holding the same data.
    hook_secret = rendered.one("Secret", secret_name)
    secret_annotations = hook_secret["metadata"]["annotations"]
    assert {h.strip() for h in secret_annotations["helm.sh/hook"].split(",")} == hooks
    assert int(secret_annotations["helm.sh/hook-weight"]) < int(annotations.get("helm.sh/hook-weight", "0"))
    decoded = {k: base64.b64decode(v).decode() for k, v in (hook_secret.get("data") or {}).items()}
    assert decoded == secret_data(values)


@pytest.mark.parametrize("combo", COMBOS)
def test_relay_accepts_the_configuration(combo: str) -> None:
    """The env the chart gives the pods passes Relay's own settings validation."""
    from relay.config import load_settings

    rendered, values = Rendered(combo), combo_values(combo)
    env = {k: v for k, v in env_of(rendered.container).items() if isinstance(v, str)}
    env["RELAY_INSTANCE_ID"] = "relay-5d9c7b9f4-abcde"
    env |= SAMPLE_EXISTING_SECRET if values["secrets"]["existingSecret"] else secret_data(values)
    settings = load_settings(env)
    assert settings.batch_payload_dir == values["batchPayloads"]["mountPath"]
    assert settings.is_postgres == database_configured(values)
    assert settings.shutdown_grace_s == values["config"]["shutdownGraceS"]


def test_service_monitor_structure() -> None:
    """ServiceMonitor is a CRD (not in the Kubernetes schemas): checked field by field."""
    checked = 0
    for combo in COMBOS:
        rendered, values = Rendered(combo), combo_values(combo)
        monitors = rendered.of_kind("ServiceMonitor")
        if not values["serviceMonitor"]["enabled"]:
            assert monitors == []
            continue
        (monitor,) = monitors
        checked += 1
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
        for key, value in values["serviceMonitor"]["labels"].items():
            assert monitor["metadata"]["labels"][key] == value
        control = rendered.one("Service", f"{fullname(values)}-control")
        inference = rendered.one("Service", fullname(values))
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert labels_match(selector, control["metadata"]["labels"]), (
            "ServiceMonitor misses the control Service"
        )
        assert not labels_match(selector, inference["metadata"]["labels"]), "ServiceMonitor selects inference"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["default"]}
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == control["spec"]["ports"][0]["name"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["interval"] == values["serviceMonitor"]["interval"]
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    assert checked, "no example enables the ServiceMonitor"


def test_notes_warn_about_replicas_without_a_shared_volume() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    branch = re.search(
        r"\{\{-? if gt \$replicas 1 \}\}\s*"
        r"\{\{-? if eq \.Values\.batchPayloads\.mode \"emptyDir\" \}\}(.*?)\{\{-? else",
        notes,
        flags=re.S,
    )
    assert branch, "NOTES.txt has no replicaCount > 1 with emptyDir branch"
    assert "WARNING" in branch.group(1) and "ReadWriteMany" in branch.group(1)
    assert "$replicas := int64 .Values.replicaCount" in notes


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
    for template in sorted((CHART / "templates").iterdir()):
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
