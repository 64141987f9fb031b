"""Spend limits through ``relay serve`` (SPEC §5, §8, §10.4): a budget is crossed after a known number
of requests — the fake upstream bills 2 input + 3 output tokens for "hello there" (and for "item <n>"),
and every binding of the live catalog is priced $1 / $2 per million, so each call costs exactly
8 000 nano-USD — per policy, credential, project and team, live (whole and streamed, OpenAI and
Anthropic shapes) and batch; the spend endpoint; bad rules refused whole.

A budget of ``$0.000024`` (three calls) admits exactly three sequential calls: the third commit makes
the committed spend equal the limit, and a call is admitted only while it is below.

The price catalog lives here too (it shares the gateways: what a call costs): a binding that says
``pricing: from_catalog`` (or names the entry) gets the catalog's prices copied in when it is written,
calls are priced with them, export and a second apply keep the reference as written, an unknown entry is
refused whole, and an unpriced binding is reported (``/api/snapshot`` problems, a warning in the log,
``relay config``). At gpt-4o-mini's $0.15 / $0.60 per million, "hello there" costs 2 × 150 + 3 × 600 =
2 100 nano-USD."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from relay.pricing.catalog import load_catalog
from tests.fixtures.live import Gateway, Scenario, uniq
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.batch_api.helpers import chat_item, results, submit, wait_finished

CALL_NANOS = 8000
THREE_CALLS = "0.000024"


def budget(limit: str = THREE_CALLS, window: str = "30d", per: str = "policy") -> dict[str, Any]:
    return {"meter": "cost_usd", "limit": limit, "window": window, "per": per}


def chat(gw: Gateway, s: Scenario, key: str | None = None) -> Any:
    return gw.chat(s.model, key=key or s.key)


def spend(gw: Gateway, policy: str) -> dict[str, Any]:
    response = gw.relay.api("GET", f"/api/policies/{policy}/spend")
    assert response.status_code == 200, response.text
    return dict(response.json())


def key_in_project(gw: Gateway, project: str, policy: str) -> tuple[str, str]:
    """A new service account in ``project`` and a relay key of it governed by ``policy``."""
    account = gw.create("service-accounts", {"name": uniq("sa"), "project": project})
    created = gw.control_write(
        "POST",
        "/api/keys",
        {"principal_kind": "serviceaccount", "principal": account["name"], "policy": policy},
        201,
    ).json()
    return created["key"]["id"], created["plaintext"]


def assert_refused(response: Any, policy: str, suffix: str = "") -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert error["message"] == f'budget exceeded: policy "{policy}" allows ${THREE_CALLS} per 30d{suffix}'
    window = 2_592_000
    assert 1 <= int(response.headers["retry-after"]) <= window - time.time() % window + 2


def test_policy_budget_is_crossed_after_three_calls_and_the_spend_endpoint_shows_it(gateway: Gateway) -> None:
    s = gateway.scenario(rules=[budget(), {"meter": "requests", "limit": 100, "window": "1m"}])
    assert chat(gateway, s).status_code == 200
    streamed = gateway.stream(
        "/v1/chat/completions",
        {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], "stream": True},
        key=s.key,
    )
    assert streamed.status == 200  # a streamed call is charged too, before its response ends
    assert chat(gateway, s).status_code == 200
    assert_refused(chat(gateway, s), s.policy)
    body = spend(gateway, s.policy)
    assert set(body) == {"rules"}
    [rule] = body["rules"]
    assert set(rule) == {"index", "window", "per", "limit_usd", "entries"}
    assert (rule["index"], rule["window"], rule["per"], rule["limit_usd"]) == (0, "30d", "policy", 0.000024)
    [entry] = rule["entries"]
    assert set(entry) == {"key", "spent_usd", "remaining_usd", "resets_at"}
    assert entry["key"] == gateway.object_id("policies", s.policy)
    assert (entry["spent_usd"], entry["remaining_usd"]) == (0.000024, 0)
    window_end = (int(time.time()) // 2_592_000 + 1) * 2_592_000
    assert entry["resets_at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(window_end))
    # by id too; an unknown policy is a 404
    assert spend(gateway, entry["key"]) == body
    assert gateway.relay.api("GET", "/api/policies/nope-nope/spend").status_code == 404


def test_anthropic_shaped_refusal(gateway: Gateway) -> None:
    s = gateway.scenario(adapter="anthropic", rules=[budget()])
    body = {"model": s.model, "max_tokens": 100, "messages": [{"role": "user", "content": "hello there"}]}
    for _ in range(3):
        assert gateway.post("/anthropic/v1/messages", body, key=s.key).status_code == 200
    refused = gateway.post("/anthropic/v1/messages", body, key=s.key)
    assert refused.status_code == 429
    assert refused.json() == {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": f'budget exceeded: policy "{s.policy}" allows ${THREE_CALLS} per 30d',
        },
    }
    assert int(refused.headers["retry-after"]) >= 1


def test_per_credential_budget_counts_each_key_apart(gateway: Gateway) -> None:
    s = gateway.scenario(rules=[budget(per="credential")])
    _other_id, other = gateway.mint_key(s.policy)
    for _ in range(3):
        assert chat(gateway, s).status_code == 200
    assert_refused(chat(gateway, s), s.policy, " per credential")
    for _ in range(3):
        assert chat(gateway, s, other).status_code == 200
    assert_refused(chat(gateway, s, other), s.policy, " per credential")
    [rule] = spend(gateway, s.policy)["rules"]
    assert sorted(e["key"] for e in rule["entries"]) == sorted([s.key_id, _other_id])


def test_per_project_budget_is_shared_within_a_project_only(gateway: Gateway) -> None:
    s = gateway.scenario(rules=[budget(per="project")])
    _, same_project = gateway.mint_key(s.policy)  # the module's service account: live-project
    other = gateway.create("projects", {"name": uniq("prj"), "team": "live-team"})
    _, other_project = key_in_project(gateway, other["name"], s.policy)
    for key in (s.key, same_project, s.key):
        assert chat(gateway, s, key).status_code == 200
    assert_refused(chat(gateway, s, same_project), s.policy, " per project")
    assert chat(gateway, s, other_project).status_code == 200
    [rule] = spend(gateway, s.policy)["rules"]
    spent = {e["key"]: e["spent_usd"] for e in rule["entries"]}
    assert spent == {gateway.object_id("projects", gateway.project): 0.000024, other["id"]: 0.000008}


def test_per_team_budget_is_shared_by_the_projects_of_a_team(gateway: Gateway) -> None:
    s = gateway.scenario(rules=[budget(per="team")])
    sibling = gateway.create("projects", {"name": uniq("prj"), "team": "live-team"})
    _, sibling_key = key_in_project(gateway, sibling["name"], s.policy)
    team = gateway.create("teams", {"name": uniq("tm")})
    stranger = gateway.create("projects", {"name": uniq("prj"), "team": team["name"]})
    _, stranger_key = key_in_project(gateway, stranger["name"], s.policy)
    for key in (s.key, sibling_key, s.key):
        assert chat(gateway, s, key).status_code == 200
    assert_refused(chat(gateway, s, sibling_key), s.policy, " per team")
    assert chat(gateway, s, stranger_key).status_code == 200


def test_batch_items_fail_budget_exceeded_once_the_budget_is_spent(gateway: Gateway) -> None:
    s = gateway.scenario(rules=[budget()])
    batch = submit(gateway, "openai", [chat_item(n, s.model) for n in range(40)], key=s.key)
    view = wait_finished(gateway, batch, s.key, timeout=60)
    rows = results(gateway, batch, s.key)
    done = [r for r in rows if r["state"] == "completed"]
    failed = [r for r in rows if r["state"] == "discarded"]
    # Items run concurrently (16 workers by default), so up to 15 more may be admitted while the
    # last paid ones are in flight; never fewer than the three the budget pays for, and the rest fail
    # with the §10.4 prefix.
    assert 3 <= len(done) <= 3 + 15, view
    assert len(done) + len(failed) == 40
    assert failed and all(r["error"].startswith("budget exceeded: ") for r in failed), failed
    [rule] = spend(gateway, s.policy)["rules"]
    assert rule["entries"][0]["spent_usd"] * 1e9 == len(done) * CALL_NANOS
    # and the live plane sees the same spent budget
    assert_refused(chat(gateway, s), s.policy)


def test_bad_budget_rules_are_refused_whole_naming_the_field(gateway: Gateway) -> None:
    bad = [
        ({"meter": "cost_usd", "limit": -5, "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": "lots", "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": 5, "window": "1y"}, "window"),
        ({"meter": "cost_usd", "limit": 5, "window": "1d", "per": "org"}, "per"),
    ]
    for rule, field in bad:
        name = uniq("p")
        response = gateway.relay.api(
            "POST", "/api/policies", {"name": name, "models": ["*"], "rate_limit": {"rules": [rule]}}
        )
        assert response.status_code == 400, response.text
        assert f"rate_limit.rules.0.{field}" in response.json()["error"]["message"]
        assert gateway.relay.api("GET", f"/api/policies/{name}").status_code == 404


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
        and str(r.get("message", "")).startswith(f"binding {binding['name']} has no pricing")
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
