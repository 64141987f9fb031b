"""A host's ``breaker`` tuning (SPEC §6) through the control plane: validated (400 naming the field,
nothing written), stored, rendered, patched, applied and exported, on SQLite and Postgres."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.fixtures.relay_server import RelayProcess

BASE_URL = "https://api.example.com"


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_host_keeps_its_breaker_tuning_and_fills_the_defaults(relay: RelayProcess) -> None:
    name = uniq("hb")
    created = relay.api(
        "POST", "/api/hosts", {"name": name, "base_url": BASE_URL, "breaker": {"threshold": 3}}
    )
    assert created.status_code == 201, created.text
    assert created.json()["breaker"] == {"threshold": 3, "window_s": 10.0, "max_open_s": 60.0}
    patched = relay.api("PATCH", f"/api/hosts/{name}", {"breaker": {"threshold": 5, "max_open_s": 300}})
    assert patched.status_code == 200, patched.text
    assert relay.api("GET", f"/api/hosts/{name}").json()["breaker"] == {
        "threshold": 5,
        "window_s": 10.0,
        "max_open_s": 300.0,
    }
    untuned = uniq("hb")
    assert relay.api("POST", "/api/hosts", {"name": untuned, "base_url": BASE_URL}).json()["breaker"] is None


@pytest.mark.parametrize(
    ("breaker", "field"),
    [
        ({"threshold": 0}, "breaker.threshold"),
        ({"threshold": 2.5}, "breaker.threshold"),
        ({"window_s": 0}, "breaker.window_s"),
        ({"max_open_s": 0.5}, "breaker.max_open_s"),
        ({"max_open_s": 10_000_000}, "breaker.max_open_s"),
        ({"thresold": 2}, "breaker.thresold"),
        ("fast", "breaker"),
    ],
)
def test_bad_tuning_is_refused_naming_the_field_and_nothing_is_written(
    relay: RelayProcess, breaker: Any, field: str
) -> None:
    name = uniq("hb")
    refused = relay.api("POST", "/api/hosts", {"name": name, "base_url": BASE_URL, "breaker": breaker})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"
    assert refused.json()["error"]["message"].startswith(f"{field}:")
    assert relay.api("GET", f"/api/hosts/{name}").status_code == 404

    relay.api("POST", "/api/hosts", {"name": name, "base_url": BASE_URL, "breaker": {"threshold": 2}})
    patch = relay.api("PATCH", f"/api/hosts/{name}", {"breaker": breaker})
    assert patch.status_code == 400 and field in patch.json()["error"]["message"]
    assert relay.api("GET", f"/api/hosts/{name}").json()["breaker"]["threshold"] == 2  # unchanged


def test_apply_and_export_carry_the_tuning(relay: RelayProcess) -> None:
    tuned, plain = uniq("hb"), uniq("hb")
    docs = [
        {
            "kind": "Host",
            "name": tuned,
            "spec": {"base_url": BASE_URL, "breaker": {"threshold": 4, "window_s": 30}},
        },
        {"kind": "Host", "name": plain, "spec": {"base_url": BASE_URL}},
    ]
    plan = relay.api("POST", "/api/apply", {"documents": docs}).json()["plan"]
    assert [step["action"] for step in plan] == ["create", "create"]
    assert relay.api("GET", f"/api/hosts/{tuned}").json()["breaker"]["window_s"] == 30

    exported = {d["name"]: d for d in relay.api("GET", "/api/export").json()["documents"]}
    assert exported[tuned]["spec"]["breaker"] == {"threshold": 4, "window_s": 30.0, "max_open_s": 60.0}
    assert "breaker" not in exported[plain]["spec"]  # untuned: nothing to say
    again = relay.api("POST", "/api/apply", {"documents": [exported[tuned], exported[plain]]}).json()["plan"]
    assert [step["action"] for step in again] == ["unchanged", "unchanged"]

    docs[0]["spec"]["breaker"] = {"threshold": 0}
    refused = relay.api("POST", "/api/apply", {"documents": docs})
    assert refused.status_code == 400 and "breaker.threshold" in refused.json()["error"]["message"]
