"""The ``Guardrail`` catalog kind through the control API (SPEC §20, §2, §11): created and patched, every
invalid field refused 422 naming it with nothing stored, a policy's ``guardrails`` list resolved and
kept in order, a referenced guardrail's delete refused 409, apply/export round trip — against real
``relay serve`` processes on SQLite and Postgres."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fixtures.relay_server import ADMIN_TOKEN, RelayProcess
from tests.integration.control.test_apply_export import run_cli, write_yaml

HOOK = {"url": "http://127.0.0.1:9/check", "fail": "closed"}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_each_matcher_is_created_with_its_defaults(relay: RelayProcess) -> None:
    regex = relay.create("guardrails", {"name": uniq("gr"), "stage": "input", "regex": [r"sk-\w+"]})
    assert (regex["action"], regex["message"], regex["pii"], regex["webhook"]) == ("block", "", None, None)
    assert regex["id"].startswith("gr_")
    pii = relay.create(
        "guardrails", {"name": uniq("gr"), "stage": "output", "action": "redact", "pii": ["email", "iban"]}
    )
    assert pii["pii"] == ["email", "iban"] and pii["regex"] is None
    hook = relay.create("guardrails", {"name": uniq("gr"), "stage": "input", "webhook": HOOK})
    assert hook["webhook"] == {**HOOK, "timeout_ms": 1000}
    patched = relay.api("PATCH", f"/api/guardrails/{regex['name']}", {"message": "no keys"})
    assert patched.status_code == 200 and patched.json()["message"] == "no keys"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"stage": "input", "regex": ["(unclosed"]}, "regex"),
        ({"stage": "input", "regex": ["a*"]}, "regex"),
        ({"stage": "input", "regex": []}, "regex"),
        ({"stage": "input", "regex": ["x"], "pii": ["email"]}, "pii"),
        ({"stage": "input"}, "regex"),
        ({"stage": "input", "pii": ["passport"]}, "pii.0"),
        ({"stage": "middle", "regex": ["x"]}, "stage"),
        ({"stage": "input", "action": "warn", "regex": ["x"]}, "action"),
        ({"stage": "input", "webhook": {"url": "http://h/x", "fail": "maybe"}}, "webhook.fail"),
        ({"stage": "input", "webhook": {"url": "ftp://h/x", "fail": "open"}}, "webhook.url"),
        (
            {"stage": "input", "webhook": {"url": "http://h/x", "fail": "open", "timeout_ms": 0}},
            "webhook.timeout_ms",
        ),
        ({"stage": "input", "regex": ["x"], "colour": "red"}, "colour"),
    ],
)
def test_an_invalid_field_is_refused_422_naming_it_and_nothing_is_stored(
    relay: RelayProcess, body: dict[str, Any], field: str
) -> None:
    name = uniq("gr")
    response = relay.api("POST", "/api/guardrails", {"name": name, **body})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"{field}:"), response.text
    assert relay.api("GET", f"/api/guardrails/{name}").status_code == 404
    applied = relay.api(
        "POST", "/api/apply", {"documents": [{"kind": "Guardrail", "name": name, "spec": body}]}
    )
    assert applied.status_code == 422 and field in applied.json()["error"]["message"]
    assert relay.api("GET", f"/api/guardrails/{name}").status_code == 404


def test_a_policy_lists_its_guardrails_in_order_and_a_named_one_cannot_be_deleted(
    relay: RelayProcess,
) -> None:
    first = relay.create("guardrails", {"name": uniq("gr"), "stage": "input", "regex": ["a"]})["name"]
    second = relay.create("guardrails", {"name": uniq("gr"), "stage": "output", "pii": ["ipv4"]})["name"]
    policy = relay.create("policies", {"name": uniq("pol"), "guardrails": [second, first]})
    assert policy["guardrails"] == [second, first]
    refused = relay.api("DELETE", f"/api/guardrails/{first}")
    assert refused.status_code == 409, refused.text
    missing = relay.api("PATCH", f"/api/policies/{policy['name']}", {"guardrails": [uniq("nope")]})
    assert missing.status_code in (400, 404, 422) and "guardrail" in missing.text.lower()
    relay.api("PATCH", f"/api/policies/{policy['name']}", {"guardrails": [second]})
    assert relay.api("DELETE", f"/api/guardrails/{first}").status_code in (200, 204)
    twice = relay.api("PATCH", f"/api/policies/{policy['name']}", {"guardrails": [second, second]})
    assert twice.status_code == 400 and twice.json()["error"]["message"].startswith("guardrails:")


def test_export_writes_guardrails_and_apply_round_trips(relay: RelayProcess, tmp_path: Path) -> None:
    s = uuid.uuid4().hex[:6]
    documents = [
        {
            "kind": "Guardrail",
            "name": f"keys-{s}",
            "spec": {"stage": "input", "action": "redact", "regex": ["sk-[a-z]+"]},
        },
        {
            "kind": "Guardrail",
            "name": f"hook-{s}",
            "spec": {"stage": "output", "webhook": HOOK, "message": "m"},
        },
        {"kind": "Policy", "name": f"guarded-{s}", "spec": {"guardrails": [f"keys-{s}", f"hook-{s}"]}},
    ]
    applied = run_cli(relay, "apply", "-f", str(write_yaml(tmp_path / "catalog.yaml", documents)))
    assert applied.returncode == 0, applied.stderr
    again = relay.api("POST", "/api/apply", {"documents": documents}).json()["plan"]
    assert [step["action"] for step in again] == ["unchanged"] * 3
    exported = run_cli(relay, "export", "-o", str(tmp_path / "export.yaml"))
    assert exported.returncode == 0, exported.stderr
    mine = [
        d for d in yaml.safe_load_all((tmp_path / "export.yaml").read_text()) if d and d["name"].endswith(s)
    ]
    by_name = {d["name"]: d for d in mine}
    assert by_name[f"keys-{s}"]["kind"] == "Guardrail"
    assert by_name[f"keys-{s}"]["spec"]["regex"] == ["sk-[a-z]+"]
    assert by_name[f"guarded-{s}"]["spec"]["guardrails"] == [f"keys-{s}", f"hook-{s}"]
    plan = relay.api("POST", "/api/apply", {"documents": mine}).json()["plan"]
    assert {step["action"] for step in plan} == {"unchanged"}


def test_the_dashboard_catalog_shows_guardrails_and_each_policys_cache_and_guardrails(
    relay: RelayProcess,
) -> None:
    guard = relay.create(
        "guardrails", {"name": uniq("gr"), "stage": "output", "action": "redact", "pii": ["email"]}
    )
    hook = relay.create("guardrails", {"name": uniq("gr"), "stage": "input", "webhook": HOOK})
    guarded = relay.create(
        "policies", {"name": uniq("pol"), "guardrails": [guard["name"], hook["name"]], "cache": {"ttl": "1h"}}
    )
    plain = relay.create("policies", {"name": uniq("pol")})
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
        page = browser.get("/ui/catalog")
    assert page.status_code == 200
    matchers = dict(
        re.findall(r'<tr data-guardrail="([^"]+)">.*?<td data-testid="matcher">([^<]*)</td>', page.text)
    )
    assert matchers[guard["name"]] == "pii: email"
    assert matchers[hook["name"]] == "webhook: http://127.0.0.1:9/check (fail closed, 1000 ms)"
    row = (
        r'<tr data-policy="([^"]+)">.*?<td data-testid="cache">([^<]*)</td>'
        r'<td data-testid="guardrails">([^<]*)</td>'
    )
    cells = {name: (cache, listed) for name, cache, listed in re.findall(row, page.text)}
    assert cells[guarded["name"]] == ("1h · project", f"{guard['name']}, {hook['name']}")
    assert cells[plain["name"]] == ("off", "none")
