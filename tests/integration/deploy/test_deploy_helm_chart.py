"""The Helm chart deploy/helm/relay: what its committed examples say.

* the rendered examples (examples/<combo>.yaml, what real Helm prints for
  examples/<combo>.values.yaml: test_deploy_helm_engine.py proves they are) wire the payload
  store and directory, probes, service links, grace period, Services, Secret, migration hook,
  PodDisruptionBudget, autoscaler, Ingress, HTTPRoute, NetworkPolicy and `helm test` pod the way
  the values say;
* values.yaml, values.schema.json, the README's values table and the templates agree.

Real Helm (render, lint, schema refusals, the upgrade's Job env) and kubernetes-validate --strict
are in test_deploy_helm_engine.py.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.deploy.deploy_helpers import (
    CHART,
    COMBOS,
    EXAMPLES,
    Rendered,
    combo_values,
    container_port,
    database_configured,
    env_of,
    fullname,
    labels_match,
    load_yaml,
    max_replicas,
)

CHART_META = load_yaml(CHART / "Chart.yaml")
SAMPLE_EXISTING_SECRET = {
    "RELAY_DATABASE_URL": "postgresql://relay:pw@postgres:5432/relay",
    "RELAY_REDIS_URL": "redis://redis:6379/0",
    "RELAY_MASTER_KEY": base64.b64encode(bytes(range(32))).decode(),
    "RELAY_ADMIN_TOKEN": "an-admin-token-of-some-length",
}


# ---------------------------------------------------------------------------------------------
# helpers


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


# ---------------------------------------------------------------------------------------------
# values.schema.json


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


def test_combinations_cover_the_payload_modes() -> None:
    modes = {
        combo: (
            max_replicas(combo_values(combo)),
            combo_values(combo)["payloads"]["store"],
            combo_values(combo)["payloads"]["mode"],
            bool(combo_values(combo)["payloads"]["persistentVolumeClaim"]["existingClaim"]),
            combo_values(combo)["config"]["batchWorkers"] > 0,
        )
        for combo in COMBOS
    }
    assert modes["default"] == (1, "files", "emptyDir", False, True)
    assert modes["shared-volume"] == (3, "files", "persistentVolumeClaim", False, True)
    assert modes["existing-claim"] == (3, "files", "persistentVolumeClaim", True, True)
    assert modes["batch-replica"] == (1, "files", "persistentVolumeClaim", False, True)
    assert modes["database-store"] == (6, "database", "emptyDir", False, True)
    assert modes["stateless-replicas"] == (3, "files", "emptyDir", False, False)
    for key in ("ingress", "httpRoute", "networkPolicy", "autoscaling"):
        assert any(combo_values(c)[key]["enabled"] for c in COMBOS), f"no example enables {key}"
    assert any(combo_values(c)["extraVolumes"] for c in COMBOS), "no example has extraVolumes"
    assert any(combo_values(c)["serviceMonitor"]["enabled"] for c in COMBOS), (
        "no example has a ServiceMonitor"
    )


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
        match = re.fullmatch(r"# Source: relay/templates/([\w./-]+\.yaml)", first)
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
        p.relative_to(CHART / "templates").as_posix()
        for p in (CHART / "templates").rglob("*.yaml")
        if not p.name.startswith("_")
    }
    seen = set()
    for combo in COMBOS:
        seen |= set(re.findall(r"^# Source: relay/templates/([\w./-]+)$", Rendered(combo).text, flags=re.M))
    assert templates - seen == set(), f"templates no example renders: {sorted(templates - seen)}"


# ---------------------------------------------------------------------------------------------
# rendered examples: wiring


@pytest.mark.parametrize("combo", COMBOS)
def test_payload_volume_wiring(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    payloads = values["payloads"]
    container = rendered.container
    env = env_of(container)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in rendered.pod_spec["volumes"]}

    assert env["RELAY_BATCH_PAYLOAD_STORE"] == payloads["store"]
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
        if max_replicas(values) > 1 and payloads["store"] == "files":
            assert values["config"]["batchWorkers"] == 0, "replicas run batch items on pod-local payloads"
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
    if max_replicas(values) > 1:
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
    if values["autoscaling"]["enabled"]:
        assert "replicas" not in deployment["spec"], "the autoscaler owns replicas"
    else:
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
def test_no_service_links_in_any_pod(combo: str) -> None:
    """A Service named relay would inject RELAY_PORT=tcp://... (and 15 more RELAY_* names)."""
    rendered = Rendered(combo)
    pod_specs = [("Deployment", rendered.pod_spec)]
    pod_specs += [("Job", job["spec"]["template"]["spec"]) for job in rendered.of_kind("Job")]
    pod_specs += [("Pod", pod["spec"]) for pod in rendered.of_kind("Pod")]
    for kind, spec in pod_specs:
        assert spec.get("enableServiceLinks") is False, f"{kind}: enableServiceLinks must be false"


@pytest.mark.parametrize("combo", COMBOS)
def test_probes_use_livez_and_readyz_on_8080(combo: str) -> None:
    container = Rendered(combo).container
    expected = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}
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
    deadline = job["spec"]["activeDeadlineSeconds"]
    assert deadline == values["migrations"]["activeDeadlineSeconds"]
    assert deadline < values["migrations"]["helmTimeoutSeconds"], "Helm stops waiting first"
    if values["migrations"]["helmTimeoutSeconds"] == 300:
        assert deadline < 300, "the Job outlives Helm's default 5-minute timeout"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] + container.get("args", []) == ["relay", "migrate"]
    assert container["resources"] == values["migrations"]["resources"]
    assert {"cpu", "memory"} <= set(container["resources"].get("requests", {})), "the Job has no requests"
    assert [v["name"] for v in pod["volumes"]] == ["tmp"] + [v["name"] for v in values["extraVolumes"]]
    assert container["volumeMounts"][1:] == values["extraVolumeMounts"]
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
    assert settings.batch_payload_dir == values["payloads"]["mountPath"]
    assert settings.is_postgres == database_configured(values)
    assert settings.shutdown_grace_s == values["config"]["shutdownGraceS"]
