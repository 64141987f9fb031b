"""``relay apply`` / ``POST /api/apply`` and ``relay export`` (SPEC §11), end to end through the CLI
against real ``relay serve`` processes on SQLite and Postgres."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.relay_server import ADMIN_TOKEN, RELAY_BIN, RelayProcess


def run_cli(relay: RelayProcess, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"RELAY_CONTROL_URL": relay.control_url, "RELAY_ADMIN_TOKEN": ADMIN_TOKEN, "PATH": "/usr/bin:/bin"}
    return subprocess.run([RELAY_BIN, *args], env=env, capture_output=True, text=True, timeout=60, cwd=cwd)


def catalog_docs(s: str, key_value: str = "sk-apply-secret") -> list[dict[str, Any]]:
    return [
        {"kind": "Team", "name": f"t-{s}", "spec": {"display_name": "Applied"}},
        {"kind": "Host", "name": f"h-{s}", "spec": {"base_url": "https://api.example.com"}},
        {"kind": "HostKey", "name": f"k-{s}", "spec": {"host": f"h-{s}", "value": key_value}},
        {"kind": "Model", "name": f"m-{s}", "spec": {"provider": "openai", "aliases": [f"a-{s}"]}},
        {
            "kind": "Binding",
            "name": f"b-{s}",
            "spec": {
                "model": f"m-{s}",
                "host": f"h-{s}",
                "adapter": "openai",
                "pricing": {"input": 1, "output": 2},
            },
        },
        {"kind": "Policy", "name": f"p-{s}", "spec": {"models": [f"m-{s}"], "host_keys": [f"k-{s}"]}},
        {"kind": "Project", "name": f"prj-{s}", "spec": {"team": f"t-{s}", "default_policy": f"p-{s}"}},
        {"kind": "ServiceAccount", "name": f"sa-{s}", "spec": {"project": f"prj-{s}"}},
        {
            "kind": "User",
            "name": f"u-{s}",
            "spec": {
                "email": f"u-{s}@example.com",
                "password": "long enough pw",
                "memberships": [{"project": f"prj-{s}"}],
            },
        },
    ]


def write_yaml(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def test_apply_creates_then_is_unchanged_then_updates(relay: RelayProcess, tmp_path: Path) -> None:
    s = uuid.uuid4().hex[:6]
    docs = catalog_docs(s)
    plan = relay.api("POST", "/api/apply", {"documents": docs}).json()["plan"]
    assert [step["action"] for step in plan] == ["create"] * len(docs)
    assert {(step["kind"], step["name"]) for step in plan} == {(d["kind"], d["name"]) for d in docs}
    again = relay.api("POST", "/api/apply", {"documents": docs}).json()["plan"]
    assert [step["action"] for step in again] == ["unchanged"] * len(docs)
    docs[0]["spec"]["display_name"] = "Changed"
    docs[2]["spec"]["value"] = "sk-rotated-upstream"
    changed = {
        (p["kind"], p["action"]) for p in relay.api("POST", "/api/apply", {"documents": docs}).json()["plan"]
    }
    assert ("Team", "update") in changed and ("HostKey", "update") in changed
    assert ("Model", "unchanged") in changed
    assert relay.api("GET", f"/api/teams/t-{s}").json()["display_name"] == "Changed"


def test_dry_run_writes_nothing_but_reports_the_plan(relay: RelayProcess) -> None:
    s = uuid.uuid4().hex[:6]
    revision = relay.api("GET", "/api/snapshot").json()["revision"]
    plan = relay.api("POST", "/api/apply", {"documents": catalog_docs(s), "dry_run": True}).json()["plan"]
    assert {step["action"] for step in plan} == {"create"}
    assert relay.api("GET", f"/api/teams/t-{s}").status_code == 404
    assert relay.api("GET", "/api/snapshot").json()["revision"] == revision


def test_apply_is_all_or_nothing(relay: RelayProcess) -> None:
    s = uuid.uuid4().hex[:6]
    docs = catalog_docs(s)
    docs.append({"kind": "Project", "name": f"bad-{s}", "spec": {"team": "team-that-does-not-exist"}})
    response = relay.api("POST", "/api/apply", {"documents": docs})
    assert response.status_code == 422
    assert "team-that-does-not-exist" in response.json()["error"]["message"]
    for doc in docs[:3]:
        plural = {"Team": "teams", "Host": "hosts", "HostKey": "host-keys"}[doc["kind"]]
        assert relay.api("GET", f"/api/{plural}/{doc['name']}").status_code == 404


def test_apply_validation_names_the_document(relay: RelayProcess) -> None:
    bad = [
        ({"documents": [{"kind": "Widget", "name": "x", "spec": {}}]}, "documents[0].kind"),
        ({"documents": [{"kind": "Team", "spec": {}}]}, "documents[0].name"),
        ({"documents": [{"kind": "Team", "name": "x", "spec": {"colour": 1}}]}, "colour"),
        ({"documents": [{"kind": "Team", "name": "x"}, {"kind": "Team", "name": "x"}]}, "twice"),
        ({"documents": "nope"}, "documents"),
    ]
    for body, expected in bad:
        response = relay.api("POST", "/api/apply", body)
        assert response.status_code == 400, response.text
        assert expected in response.json()["error"]["message"]


def test_prune_deletes_unnamed_objects_of_applied_kinds(database_url: str, relay_factory: Any) -> None:
    relay: RelayProcess = relay_factory(database_url)  # its own catalog: prune sees every object
    s = uuid.uuid4().hex[:6]
    docs = catalog_docs(s)
    relay.api("POST", "/api/apply", {"documents": docs})
    extra = relay.create("models", {"name": f"extra-{s}", "provider": "openai"})
    used = relay.create("models", {"name": f"used-{s}", "provider": "openai"})
    relay.create(
        "bindings", {"name": f"ub-{s}", "model": used["name"], "host": f"h-{s}", "adapter": "openai"}
    )
    models_only = [d for d in docs if d["kind"] == "Model"]

    # A model still bound cannot be pruned: the whole apply is refused, nothing deleted.
    refused = relay.api("POST", "/api/apply", {"documents": models_only, "prune": True})
    assert refused.status_code == 409 and "still referenced" in refused.json()["error"]["message"]
    assert relay.api("GET", f"/api/models/{extra['id']}").status_code == 200

    relay.api("DELETE", f"/api/bindings/ub-{s}")
    dry = relay.api("POST", "/api/apply", {"documents": models_only, "prune": True, "dry_run": True}).json()
    assert {"kind": "Model", "name": extra["name"], "action": "delete"} in dry["plan"]
    assert relay.api("GET", f"/api/models/{extra['id']}").status_code == 200
    plan = relay.api("POST", "/api/apply", {"documents": models_only, "prune": True}).json()["plan"]
    assert {(p["name"], p["action"]) for p in plan} == {
        (f"m-{s}", "unchanged"),
        (extra["name"], "delete"),
        (used["name"], "delete"),
    }
    assert relay.api("GET", f"/api/models/{extra['id']}").status_code == 404
    assert relay.api("GET", f"/api/teams/t-{s}").status_code == 200  # kinds not applied are untouched


def test_cli_apply_export_round_trip(relay: RelayProcess, tmp_path: Path) -> None:
    s = uuid.uuid4().hex[:6]
    source = write_yaml(tmp_path / "catalog.yaml", catalog_docs(s))
    dry = run_cli(relay, "apply", "-f", str(source), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stderr and f"Team\tt-{s}\tcreate" in dry.stdout
    assert relay.api("GET", f"/api/teams/t-{s}").status_code == 404
    applied = run_cli(relay, "apply", "-f", str(source))
    assert applied.returncode == 0, applied.stderr
    assert relay.api("GET", f"/api/teams/t-{s}").status_code == 200

    exported = run_cli(relay, "export", "-o", str(tmp_path / "export.yaml"))
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "export.yaml").read_text()
    assert "sk-apply-secret" not in text and "long enough pw" not in text
    documents = [d for d in yaml.safe_load_all(text) if d]
    mine = [d for d in documents if d["name"].endswith(s)]
    assert {d["kind"] for d in mine} == {d["kind"] for d in catalog_docs(s)}
    key_doc = next(d for d in mine if d["kind"] == "HostKey")
    assert "value" not in key_doc["spec"]
    # Re-applying the export changes nothing and keeps the stored key value.
    reapplied = relay.api("POST", "/api/apply", {"documents": mine}).json()["plan"]
    assert {p["action"] for p in reapplied} == {"unchanged"}
    assert relay.api("GET", f"/api/host-keys/k-{s}").json()["has_value"] is True
    # Stdout export works too.
    assert f"t-{s}" in run_cli(relay, "export").stdout


def test_exported_host_key_without_value_cannot_create(relay: RelayProcess) -> None:
    s = uuid.uuid4().hex[:6]
    relay.create("hosts", {"name": f"h-{s}", "base_url": "https://x.example"})
    response = relay.api(
        "POST",
        "/api/apply",
        {"documents": [{"kind": "HostKey", "name": f"k-{s}", "spec": {"host": f"h-{s}"}}]},
    )
    assert response.status_code == 422
    assert relay.api("GET", f"/api/host-keys/k-{s}").status_code == 404


def test_cli_errors_are_one_line(relay: RelayProcess, tmp_path: Path) -> None:
    missing = run_cli(relay, "apply", "-f", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and "no such file" in missing.stderr
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: [unclosed\n")
    result = run_cli(relay, "apply", "-f", str(bad_yaml))
    assert result.returncode == 1 and "not valid YAML" in result.stderr
    invalid = write_yaml(tmp_path / "invalid.yaml", [{"kind": "Team", "name": "BAD NAME", "spec": {}}])
    result = run_cli(relay, "apply", "-f", str(invalid))
    assert result.returncode == 1 and "400" in result.stderr and "name" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_reference_names_its_document(relay: RelayProcess) -> None:
    """In a file of dozens of documents, "Model 'x' not found" alone does not say which one is wrong."""
    s = uuid.uuid4().hex[:6]
    docs = catalog_docs(s)
    docs[4]["spec"]["model"] = f"nosuch-{s}"  # the Binding's model
    response = relay.api("POST", "/api/apply", {"documents": docs})
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert message.startswith(f"documents[4] (Binding b-{s}): "), message
    assert f"nosuch-{s}" in message
    new_key = {"kind": "HostKey", "name": f"k2-{s}", "spec": {"host": f"h-{s}"}}
    response = relay.api("POST", "/api/apply", {"documents": [*docs[:2], new_key]})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"documents[2] (HostKey k2-{s}): a new host key")


def test_cli_points_errors_at_the_line_of_the_file(relay: RelayProcess, tmp_path: Path) -> None:
    bad_yaml = tmp_path / "flow.yaml"
    bad_yaml.write_text("kind: Team\nname: x\nspec: {display_name: [a, b}\n")
    result = run_cli(relay, "apply", "-f", str(bad_yaml))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        f"error: {bad_yaml}: not valid YAML: line 3, column 27: expected ',' or ']', but got '}}' "
        "(while parsing a flow sequence started at line 3, column 22)"
    )
    s = uuid.uuid4().hex[:6]
    docs = catalog_docs(s)
    docs[4]["spec"]["model"] = f"nosuch-{s}"
    path = write_yaml(tmp_path / "catalog.yaml", docs)
    line = [n + 1 for n, text in enumerate(path.read_text().splitlines()) if text.startswith("kind:")][4]
    result = run_cli(relay, "apply", "-f", str(path))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: 422: documents[4] at line {line} (Binding b-{s}): "), lines
    assert relay.api("GET", f"/api/teams/t-{s}").status_code == 404  # all or nothing
