"""The chart's optional resources in the committed examples: PodDisruptionBudget, autoscaler,
Ingress, Gateway API HTTPRoute, NetworkPolicy, `helm test` pod, extra volumes and ServiceMonitor.
The custom resources (HTTPRoute, ServiceMonitor) are not in kubernetes-validate's schemas, so they
are checked field by field here."""

from __future__ import annotations

import pytest

from tests.integration.deploy.deploy_helpers import (
    COMBOS,
    Rendered,
    combo_values,
    container_port,
    fullname,
    labels_match,
    max_replicas,
)


def pod_labels(rendered: Rendered) -> dict[str, str]:
    return rendered.deployment["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("combo", COMBOS)
def test_pod_disruption_budget(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    budgets = rendered.of_kind("PodDisruptionBudget")
    settings = values["podDisruptionBudget"]
    if not settings["enabled"]:
        assert budgets == []
        return
    (pdb,) = budgets
    assert labels_match(pdb["spec"]["selector"]["matchLabels"], pod_labels(rendered))
    for job in rendered.of_kind("Job"):
        assert not labels_match(
            pdb["spec"]["selector"]["matchLabels"], job["spec"]["template"]["metadata"]["labels"]
        )
    bounds = {k: pdb["spec"][k] for k in ("maxUnavailable", "minAvailable") if k in pdb["spec"]}
    expected = {k: v for k, v in settings.items() if k in ("maxUnavailable", "minAvailable") and v != ""}
    assert bounds == expected and len(bounds) == 1
    if isinstance(bounds.get("minAvailable"), int):
        assert bounds["minAvailable"] < max_replicas(values), "the budget would block every drain"


@pytest.mark.parametrize("combo", COMBOS)
def test_autoscaler(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    hpas = rendered.of_kind("HorizontalPodAutoscaler")
    settings = values["autoscaling"]
    if not settings["enabled"]:
        assert hpas == [] and rendered.deployment["spec"]["replicas"] == values["replicaCount"]
        return
    (hpa,) = hpas
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", rendered.deployment["metadata"]["name"])
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (
        settings["minReplicas"],
        settings["maxReplicas"],
    )
    metrics = {
        m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"]
    }
    expected = {
        "cpu": settings["targetCPUUtilizationPercentage"],
        "memory": settings["targetMemoryUtilizationPercentage"],
    }
    assert metrics == {k: v for k, v in expected.items() if v}
    assert "replicas" not in rendered.deployment["spec"], (
        "the Deployment must leave replicas to the autoscaler"
    )


@pytest.mark.parametrize("combo", COMBOS)
def test_ingress_routes_to_the_inference_service_only(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    ingresses = rendered.of_kind("Ingress")
    settings = values["ingress"]
    if not settings["enabled"]:
        assert ingresses == []
        return
    (ingress,) = ingresses
    assert ingress["spec"].get("ingressClassName", "") == settings["className"]
    assert (ingress["metadata"].get("annotations") or {}) == settings["annotations"]
    assert ingress["spec"].get("tls", []) == settings["tls"]
    assert [r["host"] for r in ingress["spec"]["rules"]] == [h["host"] for h in settings["hosts"]]
    service = rendered.one("Service", fullname(values))
    for rule, host in zip(ingress["spec"]["rules"], settings["hosts"], strict=True):
        assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [
            (p["path"], p["pathType"]) for p in host["paths"]
        ]
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"], (
                "the Ingress must reach the inference Service"
            )
            assert backend["port"]["name"] == service["spec"]["ports"][0]["name"]


@pytest.mark.parametrize("combo", COMBOS)
def test_http_route(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    routes = rendered.of_kind("HTTPRoute")
    settings = values["httpRoute"]
    if not settings["enabled"]:
        assert routes == []
        return
    (route,) = routes
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert set(route) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(route["spec"]) <= {"parentRefs", "hostnames", "rules"}
    assert route["spec"]["parentRefs"] == settings["parentRefs"] and settings["parentRefs"]
    assert route["spec"].get("hostnames", []) == settings["hostnames"]
    (rule,) = route["spec"]["rules"]
    assert set(rule) == {"matches", "backendRefs"}
    assert rule["matches"] == settings["matches"]
    (backend,) = rule["backendRefs"]
    assert backend == {"name": fullname(values), "port": values["service"]["port"]}, "inference Service only"


@pytest.mark.parametrize("combo", COMBOS)
def test_network_policy(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    policies = rendered.of_kind("NetworkPolicy")
    settings = values["networkPolicy"]
    if not settings["enabled"]:
        assert policies == []
        return
    (policy,) = policies
    assert labels_match(policy["spec"]["podSelector"]["matchLabels"], pod_labels(rendered))
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress stays open: upstreams are anywhere"
    rules = {container_port(rendered.container, r["ports"][0]["port"]): r for r in policy["spec"]["ingress"]}
    inference = rules[8080]
    if settings["inferenceFrom"]:
        assert inference["from"][:-1] == settings["inferenceFrom"]
        test_pods = [p["metadata"]["labels"] for p in rendered.of_kind("Pod")]
        assert all(labels_match(inference["from"][-1]["podSelector"]["matchLabels"], t) for t in test_pods)
    else:
        assert "from" not in inference, "inferenceFrom [] means any source"
    if settings["controlFrom"]:
        assert rules[8081]["from"] == settings["controlFrom"]
    else:
        assert 8081 not in rules, "controlFrom [] means nobody reaches the control port"


@pytest.mark.parametrize("combo", COMBOS)
def test_helm_test_pod(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    pods = rendered.of_kind("Pod")
    if not values["tests"]["enabled"]:
        assert pods == []
        return
    (pod,) = pods
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    for service in rendered.of_kind("Service"):
        assert not labels_match(service["spec"]["selector"], pod["metadata"]["labels"]), (
            "a Service selects it"
        )
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == rendered.container["image"], "the test pod runs the Relay image"
    assert container["resources"] == values["tests"]["resources"]
    script = container["command"][-1]
    url = f"http://{fullname(values)}:{values['service']['port']}"
    assert f'"{url}" + path' in script and '"/livez", "/readyz"' in script
    compile(script, "helm-test", "exec")  # the probe script is valid Python


@pytest.mark.parametrize("combo", COMBOS)
def test_extra_volumes_and_env(combo: str) -> None:
    rendered, values = Rendered(combo), combo_values(combo)
    volumes = [v for v in rendered.pod_spec["volumes"] if v["name"] not in ("tmp", "data", "batch-payloads")]
    assert volumes == values["extraVolumes"]
    mounts = rendered.container["volumeMounts"][3:]
    assert mounts == values["extraVolumeMounts"]
    env = rendered.container["env"]
    assert env[len(env) - len(values["extraEnv"]) :] == values["extraEnv"]
    for job in rendered.of_kind("Job"):
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["env"][len(container["env"]) - len(values["extraEnv"]) :] == values["extraEnv"]


def test_service_monitor_structure() -> None:
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
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}, "no bearer: /metrics is open"
    assert checked, "no example enables the ServiceMonitor"
