"""Submit, poll, collect, cancel (SPEC §10.1–§10.5, §10.8) against a real Relay with workers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.live import CHAT_MODEL, MESSAGES_MODEL, Gateway, metric_value, uniq
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.batch_api.helpers import (
    batch_events,
    chat_item,
    not_found,
    results,
    status,
    submit,
    wait_events,
    wait_finished,
)

VIEW_KEYS = {
    "ID",
    "RelayKeyHash",
    "PolicyID",
    "ProjectID",
    "TeamID",
    "PrincipalKind",
    "PrincipalID",
    "CredentialKind",
    "CredentialID",
    "InboundShape",
    "Status",
    "TotalItems",
    "CreatedAt",
    "CompletedAt",
    "counts",
    "items",
}


def payload_dirs(gw: Gateway) -> set[str]:
    root = Path(gw.relay.workdir) / "relay-batch-payloads"
    return {p.name for p in root.iterdir()} if root.exists() else set()


REJECTIONS: list[tuple[Any, str]] = [
    (b"not json", "the body must be a JSON object"),
    ([1, 2], "the body must be a JSON object"),
    ({"requests": [{}]}, "shape is required: one of openai, anthropic, openai_responses"),
    (
        {"shape": "canonical", "requests": [{}]},
        "cannot be batched: use one of openai, anthropic, openai_responses",
    ),
    ({"shape": "embeddings", "requests": [{}]}, "canonical and embeddings requests cannot be batched"),
    ({"shape": "openai"}, "requests is required"),
    ({"shape": "openai", "requests": {"a": 1}}, "requests must be a list"),
    ({"shape": "openai", "requests": []}, "requests must not be empty"),
    ({"shape": "openai", "requests": [{}] * 50_001}, "at most 50000 are allowed (RELAY_BATCH_MAX_ITEMS)"),
    ({"shape": "openai", "requests": [{}] * 7 + ["x"]}, "requests[7]: must be a JSON object"),
    (
        {"shape": "openai", "requests": [{}, {"model": "m", "stream": True}]},
        "requests[1]: stream is not allowed",
    ),
]


@pytest.mark.parametrize(("body", "message"), REJECTIONS)
def test_rejections_write_nothing(gateway: Gateway, body: Any, message: str) -> None:
    before = payload_dirs(gateway)
    if isinstance(body, bytes):
        response = gateway.post("/v1/batches", content=body)
    else:
        response = gateway.post("/v1/batches", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"], error
    assert payload_dirs(gateway) == before


def test_credentials_are_checked_like_inference(gateway: Gateway) -> None:
    response = gateway.post("/v1/batches", {"shape": "openai", "requests": [chat_item()]}, headers={})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    response = gateway.post(
        "/v1/batches", {"shape": "openai", "requests": [chat_item()]}, key="sk-relay-nope"
    )
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "invalid api key"
    batch_id = submit(gateway, "openai", [chat_item()])
    for method, path in (("GET", ""), ("GET", "/results"), ("POST", "/cancel")):
        for headers in ({}, gateway.auth("sk-relay-nope")):
            answer = gateway.client.request(method, f"/v1/batches/{batch_id}{path}", headers=headers)
            assert answer.status_code == 401, (method, path, answer.text)


def test_batch_runs_end_to_end(gateway: Gateway) -> None:
    """~20 items complete; status view, results in idx order (JSON and JSONL), one usage event each."""
    n = 20
    batch_id = submit(gateway, "openai", [chat_item(i) for i in range(n)])
    view = wait_finished(gateway, batch_id)
    assert set(view) == VIEW_KEYS
    assert view["ID"] == batch_id and view["Status"] == "queued" and view["TotalItems"] == n
    assert view["InboundShape"] == "openai" and view["CredentialKind"] == "key"
    assert view["PrincipalKind"] == "serviceaccount" and len(view["RelayKeyHash"]) == 64
    assert view["counts"] == {"completed": n}
    assert view["items"] == [{"idx": i, "state": "completed"} for i in range(n)]
    assert view["CreatedAt"].endswith("Z") and view["CompletedAt"].endswith("Z")

    for jsonl in (False, True):
        got = results(gateway, batch_id, jsonl=jsonl)
        assert [r["idx"] for r in got] == list(range(n))
        for r in got:
            assert set(r) == {"idx", "state", "response"} and r["state"] == "completed"
            assert isinstance(r["response"], dict) and r["response"].get("choices"), r

    events = wait_events(gateway, batch_id, n)
    assert sorted(e["batch_idx"] for e in events) == list(range(n))
    for e in events:
        assert e["source"] == "batch" and e["batch_id"] == batch_id and e["status"] == 200
        assert e["model"] == CHAT_MODEL and e["error_kind"] is None
        assert e["cost_nanos"] is not None and e["cost_nanos"] > 0
        assert e["policy_id"] == view["PolicyID"] and e["credential_id"] == view["CredentialID"]


def test_batch_metrics(gateway: Gateway) -> None:
    """SPEC §12: batch items by state (open ones from the database, final ones this replica wrote) and
    the worker pool's busy/idle slots (16 by default). The pool reserves more ahead, which stay
    ``available`` (SPEC §10.2): ``running`` counts the 16 executing, never more."""
    before = gateway.metrics()
    n, slow = 40, {"latency_ms": 1500}
    batch_id = submit(
        gateway,
        "openai",
        [chat_item(i, fake=slow) for i in range(n - 1)] + [chat_item(99, fake={"status": 400})],
    )

    def sampled(text: str) -> tuple[float, ...]:
        return (
            metric_value(text, "relay_batch_items", state="running"),
            metric_value(text, "relay_batch_items", state="available"),
            metric_value(text, "relay_batch_workers", state="busy"),
            metric_value(text, "relay_batch_workers", state="idle"),
        )

    deadline = time.monotonic() + 10
    while sampled(gateway.metrics()) != (16, n - 16, 16, 0):  # 16 run, the rest (reserved or not) wait
        assert time.monotonic() < deadline, sampled(gateway.metrics())
        time.sleep(0.1)
    wait_finished(gateway, batch_id)
    after = gateway.metrics()
    for state, grew in (("completed", n - 1), ("discarded", 1), ("cancelled", 0)):
        name, labels = "relay_batch_items_finished_total", {"state": state}
        assert metric_value(after, name, **labels) - metric_value(before, name, **labels) == grew
    assert sampled(after)[2:] == (0, 16)


def test_a_small_batch_does_not_wait_for_a_large_one(gateway: Gateway) -> None:
    """SPEC §10.6 fair order: a small batch submitted after a large one starts at the next free slot
    (the least recently served batch goes first), while the large one still has most of its items
    waiting; within a batch, items start in idx order."""
    large = submit(gateway, "openai", [chat_item(i, fake={"latency_ms": 400}) for i in range(96)])
    small = submit(gateway, "openai", [chat_item(i) for i in range(2)])
    assert wait_finished(gateway, small)["counts"] == {"completed": 2}
    view = status(gateway, large)
    assert view["counts"].get("available", 0) >= 32, view["counts"]  # a third not even claimed yet
    started = [item["idx"] for item in view["items"] if item["state"] != "available"]
    assert started == list(range(len(started)))  # the lowest idxs were claimed first
    wait_finished(gateway, large)


def test_items_started_are_counted_per_project(gateway: Gateway) -> None:
    """SPEC §17: ``relay_batch_items_started_total{project}`` (the project's id) counts the items this
    replica started for each project."""
    team, project, account = uniq("tm"), uniq("prj"), uniq("sa")
    docs = [
        {"kind": "Team", "name": team, "spec": {"display_name": team}},
        {"kind": "Project", "name": project, "spec": {"team": team, "default_policy": gateway.policy}},
        {"kind": "ServiceAccount", "name": account, "spec": {"project": project}},
    ]
    gateway.control_write("POST", "/api/apply", {"documents": docs}, 200)
    minted = gateway.control_write(
        "POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": account}, 201
    )
    other_key = minted.json()["plaintext"]
    before = gateway.metrics()

    ours = submit(gateway, "openai", [chat_item(i) for i in range(3)])
    theirs = submit(gateway, "openai", [chat_item(i) for i in range(5)], key=other_key)
    projects = {
        wait_finished(gateway, ours)["ProjectID"]: 3,
        wait_finished(gateway, theirs, key=other_key)["ProjectID"]: 5,
    }

    after = gateway.metrics()
    assert len(projects) == 2
    for project_id, count in projects.items():
        grew = metric_value(after, "relay_batch_items_started_total", project=project_id) - metric_value(
            before, "relay_batch_items_started_total", project=project_id
        )
        assert grew == count, (project_id, grew)


def test_submit_poll_and_results_do_not_count_against_limits(gateway: Gateway) -> None:
    """SPEC §10.1: submitting, polling and reading results are free; each item counts when it runs."""
    limited = gateway.scenario(rules=[{"meter": "requests", "limit": 1, "window": "9999999s"}])
    batch_id = submit(gateway, "openai", [chat_item(0, model=limited.model)], key=limited.key)
    for _ in range(3):
        status(gateway, batch_id, limited.key)
        results(gateway, batch_id, limited.key)
    assert wait_finished(gateway, batch_id, limited.key)["counts"] == {"completed": 1}
    # The item took the one request the window allows: the next one, live or batched, is refused.
    assert gateway.chat(limited.model, key=limited.key).status_code == 429
    again = submit(gateway, "openai", [chat_item(1, model=limited.model)], key=limited.key)
    wait_finished(gateway, again, limited.key)
    (refused,) = results(gateway, again, limited.key)
    assert refused["state"] == "discarded" and refused["error"].startswith("rate limit exceeded: ")


def test_the_owner_reads_and_cancels_without_a_usable_policy(gateway: Gateway) -> None:
    """Reading, collecting and cancelling one's own batch needs a valid credential, not a usable policy
    (a choice where SPEC §10.8 is silent): after the policy is disabled the owner can still see why the
    items failed, while a new submission is refused like any inference call (403)."""
    own = gateway.scenario()
    batch_id = submit(
        gateway,
        "openai",
        [chat_item(i, model=own.model, fake={"latency_ms": 800}) for i in range(20)],
        key=own.key,
    )
    gateway.patch("policies", own.policy, {"enabled": False})
    deadline = time.monotonic() + 5
    while gateway.post("/v1/batches", {"shape": "openai", "requests": [{}]}, key=own.key).status_code != 403:
        assert time.monotonic() < deadline, "the snapshot never saw the disabled policy"
        time.sleep(0.05)
    refused = gateway.post("/v1/batches", {"shape": "openai", "requests": [{}]}, key=own.key)
    assert refused.json()["error"]["code"] == "policy_disabled"
    assert status(gateway, batch_id, own.key)["ID"] == batch_id
    cancelled = gateway.post(f"/v1/batches/{batch_id}/cancel", key=own.key)
    assert cancelled.status_code == 200, cancelled.text
    view = wait_finished(gateway, batch_id, own.key)
    got = results(gateway, batch_id, own.key)
    assert len(got) == 20 and {r["state"] for r in got} <= {"completed", "discarded", "cancelled"}
    for r in got:
        if r["state"] == "discarded":
            assert r["error"] == f'policy unavailable: policy "{own.policy}" is disabled'
    assert view["Status"] == "cancelled"
    not_found(gateway.client.get(f"/v1/batches/{batch_id}", headers=gateway.auth(None)))  # another key


def test_item_failures(gateway: Gateway) -> None:
    requests = [
        chat_item(0),
        chat_item(1, fake={"status": 400}),
        chat_item(2, model="no-such-model"),
        {"messages": [{"role": "user", "content": "no model"}]},
        chat_item(4),
    ]
    batch_id = submit(gateway, "openai", requests)
    wait_finished(gateway, batch_id)
    got = results(gateway, batch_id)
    assert [r["state"] for r in got] == ["completed", "discarded", "discarded", "discarded", "completed"]
    assert got[1]["error"] == "upstream returned 400: Invalid request." and "response" not in got[1]
    assert got[2]["error"] == 'routing: model "no-such-model" not found'
    assert got[3]["error"].startswith("routing: ")
    events = {e["batch_idx"]: e for e in wait_events(gateway, batch_id, 5)}
    assert len(events) == 5
    assert (
        events[1]["status"] == 400 and events[1]["error_message"] == "upstream returned 400: Invalid request."
    )
    assert events[1]["cost_nanos"] is None
    assert events[2]["status"] == 0 and events[2]["error_message"].startswith("routing: ")

    cross = submit(gateway, "anthropic", [{"model": CHAT_MODEL, "max_tokens": 5, "messages": []}])
    wait_finished(gateway, cross)
    assert (
        results(gateway, cross)[0]["error"]
        == "cross-shape dispatch: item shape anthropic, binding adapter openai"
    )

    same = submit(
        gateway,
        "anthropic",
        [{"model": MESSAGES_MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}],
    )
    wait_finished(gateway, same)
    assert results(gateway, same)[0]["state"] == "completed"


def test_only_the_owner_sees_a_batch(gateway: Gateway) -> None:
    batch_id = submit(gateway, "openai", [chat_item()])
    _, other = gateway.mint_key()
    not_found(gateway.client.get(f"/v1/batches/{batch_id}", headers=gateway.auth(other)))
    not_found(gateway.client.get(f"/v1/batches/{batch_id}/results", headers=gateway.auth(other)))
    not_found(gateway.post(f"/v1/batches/{batch_id}/cancel", key=other))
    not_found(gateway.client.get("/v1/batches/b_00000000000000000000000000", headers=gateway.auth(None)))
    not_found(gateway.client.get("/v1/batches/whatever", headers=gateway.auth(None)))
    assert status(gateway, batch_id)["ID"] == batch_id


def _token(gateway: Gateway, user_id: str) -> str:
    response = gateway.relay.api("POST", f"/api/users/{user_id}/tokens", {"project": gateway.project})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["token"])


def test_tokens_of_the_same_user_share_batches(gateway: Gateway) -> None:
    users = []
    for _ in range(2):
        name = uniq("u")
        doc = {
            "kind": "User",
            "name": name,
            "spec": {"email": f"{name}@example.com", "memberships": [{"project": gateway.project}]},
        }
        gateway.control_write("POST", "/api/apply", {"documents": [doc]}, 200)
        users.append(gateway.object_id("users", name))
    first, second, stranger = _token(gateway, users[0]), _token(gateway, users[0]), _token(gateway, users[1])
    batch_id = submit(gateway, "openai", [chat_item(0), chat_item(1)], key=first)
    view = wait_finished(gateway, batch_id, key=second)
    assert view["RelayKeyHash"] == f"user:{users[0]}" and view["CredentialKind"] == "token"
    assert view["PrincipalKind"] == "user" and view["PrincipalID"] == users[0]
    assert [r["state"] for r in results(gateway, batch_id, key=second)] == ["completed", "completed"]
    not_found(gateway.client.get(f"/v1/batches/{batch_id}", headers=gateway.auth(stranger)))


def test_cancel(gateway: Gateway) -> None:
    n = 40  # more than the 16 workers: some run (slowly), the rest wait
    batch_id = submit(gateway, "openai", [chat_item(i, fake={"latency_ms": 5000}) for i in range(n)])
    response = gateway.post(f"/v1/batches/{batch_id}/cancel")
    assert response.status_code == 200 and response.json() == {"status": "cancelled"}
    view = wait_finished(gateway, batch_id, timeout=10)
    assert view["Status"] == "cancelled"
    assert view["counts"] == {"cancelled": n}
    got = results(gateway, batch_id, jsonl=True)
    assert got == [{"idx": i, "state": "cancelled", "error": "cancelled"} for i in range(n)]
    again = gateway.post(f"/v1/batches/{batch_id}/cancel")
    assert again.status_code == 200 and again.json() == {"status": "cancelled"}
    events = wait_events(gateway, batch_id, n)
    assert len(events) == n and len({e["batch_idx"] for e in events}) == n
    assert all(e["error_kind"] == "cancelled" and e["error_message"] == "cancelled" for e in events)
    assert all(e["cost_nanos"] is None for e in events)
    assert len(batch_events(gateway, batch_id)) == n


def _cli(gateway: Gateway, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(RELAY_URL=gateway.url, RELAY_API_KEY=gateway.key)
    return subprocess.run(
        [RELAY_BIN, "batch", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_cli(gateway: Gateway, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(chat_item(i)) for i in range(3)) + "\n")
    done = _cli(gateway, "submit", str(source), "--shape", "openai", "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    batch_id = done.stdout.strip()
    assert batch_id.startswith("b_") and "\n" not in batch_id
    out = tmp_path / "out.jsonl"
    got = _cli(gateway, "results", batch_id, "-o", str(out), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["idx"], r["state"]) for r in lines] == [(0, "completed"), (1, "completed"), (2, "completed")]
    assert _cli(gateway, "status", batch_id, cwd=tmp_path).returncode == 0
    assert _cli(gateway, "cancel", batch_id, cwd=tmp_path).returncode == 0

    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps([chat_item(0), chat_item(1, fake={"status": 400})]))
    assert _cli(gateway, "submit", str(failing), "--shape", "openai", "--wait", cwd=tmp_path).returncode == 2

    before = payload_dirs(gateway)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(chat_item(0)) + "\nnot json\n")
    refused = _cli(gateway, "submit", str(bad), "--shape", "openai", cwd=tmp_path)
    assert refused.returncode == 1 and "line 2" in refused.stderr and refused.stdout == ""
    unknown = _cli(gateway, "submit", str(source), "--shape", "canonical", cwd=tmp_path)
    assert unknown.returncode != 0 and "unknown shape" in unknown.stderr
    missing = _cli(gateway, "submit", str(tmp_path / "nope.jsonl"), "--shape", "openai", cwd=tmp_path)
    assert missing.returncode == 1 and "no such file" in missing.stderr
    assert payload_dirs(gateway) == before
