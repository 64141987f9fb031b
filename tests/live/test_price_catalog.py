"""The price catalog through ``relay serve`` (issue 20): a binding that says ``pricing: from_catalog``
(or names the entry) gets the catalog's prices copied in when it is written, calls are priced with
them, export and a second apply keep the reference as written, an unknown entry is refused whole,
and an unpriced binding is reported (``/api/snapshot`` problems and a warning in the log).

The fake bills 2 input + 3 output tokens for "hello there": at gpt-4o-mini's $0.15 / $0.60 per
million that is 2 × 150 + 3 × 600 = 2 100 nano-USD."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from relay.pricing.catalog import load_catalog
from tests.fixtures.live import Gateway, uniq
from tests.fixtures.relay_server import RELAY_BIN


def events_for(gw: Gateway, model: str, count: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        response = gw.relay.api("GET", f"/api/usage/events?model={model}&limit=100")
        assert response.status_code == 200, response.text
        found = list(response.json()["events"])
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_binding_prices_come_from_the_catalog_when_written(gateway: Gateway) -> None:
    catalog = load_catalog()
    host = gateway.new_host()
    key = gateway.new_host_key(host["name"], "ok")
    by_upstream, by_name = uniq("m"), uniq("m")
    for model in (by_upstream, by_name):
        gateway.create("models", {"name": model, "provider": "openai"})
    implicit = gateway.create(
        "bindings",
        {
            "name": uniq("b"),
            "model": by_upstream,
            "host": host["name"],
            "adapter": "openai",
            "upstream_name": "gpt-4o-mini",
            "pricing": "from_catalog",
        },
    )
    explicit = gateway.create(
        "bindings",
        {
            "name": uniq("b"),
            "model": by_name,
            "host": host["name"],
            "adapter": "anthropic",
            "pricing": {"from_catalog": "claude-sonnet-4-20250514"},  # an alias of the entry
        },
    )
    assert implicit["pricing"] == {
        "input": 0.15,
        "output": 0.6,
        "cached_input": 0.075,
        "from_catalog": "gpt-4o-mini",
        "catalog_date": catalog.date,
        "written_as": "from_catalog",
    }
    assert explicit["pricing"]["from_catalog"] == "claude-sonnet-4"
    assert (explicit["pricing"]["input"], explicit["pricing"]["output"]) == (3.0, 15.0)
    # a live call is priced with the copied prices
    policy = gateway.new_policy(host_keys=[key["name"]])
    _, relay_key = gateway.mint_key(policy["name"])
    assert gateway.chat(by_upstream, key=relay_key).status_code == 200
    [event] = events_for(gateway, by_upstream)
    assert event["cost_nanos"] == 2100
    # export keeps the reference as written; applying it again changes nothing
    exported = gateway.relay.api("GET", "/api/export").json()["documents"]
    mine = [
        d for d in exported if d["kind"] == "Binding" and d["name"] in (implicit["name"], explicit["name"])
    ]
    assert sorted(str(d["spec"]["pricing"]) for d in mine) == sorted(
        ["from_catalog", str({"from_catalog": "claude-sonnet-4-20250514"})]
    )
    plan = gateway.relay.api("POST", "/api/apply", {"documents": mine}).json()["plan"]
    assert {step["action"] for step in plan} == {"unchanged"}, plan


def test_an_unknown_catalog_entry_is_refused_and_nothing_is_written(gateway: Gateway) -> None:
    model = uniq("m")
    gateway.create("models", {"name": model, "provider": "openai"})
    for pricing, field in (
        ({"from_catalog": "gpt-9-ultra"}, "pricing.from_catalog"),
        ("from_catalog", "pricing"),
    ):
        name = uniq("b")
        response = gateway.relay.api(
            "POST",
            "/api/bindings",
            {"name": name, "model": model, "host": "live-openai", "adapter": "openai", "pricing": pricing},
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"].startswith(f"{field}: "), response.text
        assert gateway.relay.api("GET", f"/api/bindings/{name}").status_code == 404


def test_an_unpriced_binding_is_reported(gateway: Gateway) -> None:
    model = uniq("m")
    gateway.create("models", {"name": model, "provider": "openai"})
    binding = gateway.create(
        "bindings", {"name": uniq("b"), "model": model, "host": "live-openai", "adapter": "openai"}
    )
    problems = gateway.relay.api("GET", "/api/snapshot").json()["problems"]
    assert any(p.startswith(f"binding {binding['name']} has no pricing") for p in problems), problems
    deadline = time.monotonic() + 10
    while not any(
        r.get("level") == "warning"
        and str(r.get("msg", "")).startswith(f"binding {binding['name']} has no pricing")
        for r in gateway.log_records()
    ):
        assert time.monotonic() < deadline, "no warning logged for the unpriced binding"
        time.sleep(0.1)
    # relay config names it too, with the catalog's date (read from the same database)
    result = subprocess.run(
        [RELAY_BIN, "config"],
        env={"PATH": "/usr/bin:/bin", **gateway.relay.env},
        cwd=gateway.relay.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"price catalog: {len(load_catalog().models)} models, prices checked {load_catalog().date}"
        in result.stdout
    )
    [line] = [x for x in result.stdout.splitlines() if x.startswith("unpriced bindings: ")]
    assert binding["name"] in line.split(": ", 1)[1].split(", "), line
