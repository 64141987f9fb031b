"""Retrying a finished batch's failed items (SPEC §17 "Retry") over HTTP against real ``relay serve``
processes: SQLite and Postgres, each with both payload stores (``RELAY_BATCH_PAYLOAD_STORE``)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, HOST_OPENAI, MESSAGES_MODEL, Gateway, Reaper, start_gateway, uniq
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.batch_api.helpers import (
    chat_item,
    mint_token,
    not_found,
    results,
    status,
    submit,
    wait_finished,
)
from tests.integration.openai_batches.helpers import create as create_openai_batch
from tests.integration.openai_batches.helpers import line, sdk

COMBOS = [("sqlite", "files"), ("sqlite", "database"), ("postgres", "files"), ("postgres", "database")]


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{b}-{s}" for b, s in COMBOS])
def gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    backend, store = request.param
    workdir: Path = tmp_path_factory.mktemp(f"retry-{backend}-{store}")
    env = {**GATEWAY_ENV, "RELAY_BATCH_PAYLOAD_STORE": store}
    yield from start_gateway(backend, workdir, fake_upstream, live_reaper, env)


def retry(
    gw: Gateway, batch_id: str, body: Any = None, *, key: str | None = None, **kw: Any
) -> httpx.Response:
    headers = {**gw.auth(key), **kw.pop("headers", {})}
    if body is None:
        return gw.client.post(f"/v1/batches/{batch_id}/retry", headers=headers, **kw)
    return gw.client.post(f"/v1/batches/{batch_id}/retry", json=body, headers=headers, **kw)


def retried(gw: Gateway, batch_id: str, body: Any = None, *, key: str | None = None) -> dict[str, Any]:
    response = retry(gw, batch_id, body, key=key)
    assert response.status_code == 202, response.text
    answer = dict(response.json())
    assert set(answer) == {"id", "status", "total_items", "retry_of"}, answer
    assert answer["status"] == "queued" and answer["retry_of"] == batch_id
    assert answer["id"].startswith("b_") and answer["id"] != batch_id
    return answer


def retry_results(gw: Gateway, batch_id: str) -> list[dict[str, Any]]:
    """A retry batch's results: ``{"retry_of", "results"}``."""
    response = gw.client.get(f"/v1/batches/{batch_id}/results", headers=gw.auth(None))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"retry_of", "results"} and body["retry_of"].startswith(("b_", "batch_", "msgbatch_"))
    return list(body["results"])


def refused(response: httpx.Response, status_code: int, code: str | None, words: str) -> None:
    assert response.status_code == status_code, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    assert words in error["message"], error


def mixed_batch(gw: Gateway, key: str | None = None) -> tuple[str, str]:
    """A finished batch of 6: 0, 2, 4 complete; 1 and 5 name a model that does not exist yet
    (``routing: ``); 3 is answered 400 by the upstream. Returns (batch id, the missing model's name)."""
    later = uniq("later")
    requests = [
        chat_item(0),
        chat_item(1, model=later),
        chat_item(2),
        chat_item(3, fake={"status": 400}),
        chat_item(4),
        chat_item(5, model=later),
    ]
    batch_id = submit(gw, "openai", requests, key=key)
    view = wait_finished(gw, batch_id, key)
    assert view["counts"] == {"completed": 3, "discarded": 3}, view
    return batch_id, later


def test_retry_copies_the_failed_items_in_order_and_never_changes_the_original(gateway: Gateway) -> None:
    batch_id, later = mixed_batch(gateway)
    before_view, before_results = status(gateway, batch_id), results(gateway, batch_id)
    # The missing model now exists: the retried items that named it complete this time.
    gateway.create("models", {"name": later, "provider": "openai"})
    gateway.bind(later, HOST_OPENAI)

    answer = retried(gateway, batch_id)
    assert answer["total_items"] == 3
    new_id = answer["id"]
    view = wait_finished(gateway, new_id)
    assert view["RetryOf"] == batch_id and view["TotalItems"] == 3
    assert view["PolicyID"] == before_view["PolicyID"] and view["RelayKeyHash"] == before_view["RelayKeyHash"]
    assert view["InboundShape"] == "openai"
    assert [i["idx"] for i in view["items"]] == [0, 1, 2]

    response = gateway.client.get(f"/v1/batches/{new_id}/results", headers=gateway.auth(None))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"retry_of", "results"} and body["retry_of"] == batch_id
    got = body["results"]
    assert [(r["idx"], r["source_idx"]) for r in got] == [(0, 1), (1, 3), (2, 5)]
    assert [r["state"] for r in got] == ["completed", "discarded", "completed"]
    assert got[1]["error"].startswith("upstream returned 400")  # the body (with its "fake") was copied
    assert all("custom_id" not in r for r in got)  # §10 items have none
    lines = results(gateway, new_id, jsonl=True)
    assert [(r["idx"], r["source_idx"], r["state"]) for r in lines] == [
        (r["idx"], r["source_idx"], r["state"]) for r in got
    ]

    # The original is never changed.
    assert status(gateway, batch_id) == before_view
    assert results(gateway, batch_id) == before_results
    assert "RetryOf" not in before_view


def test_the_retry_runs_under_the_policy_governing_the_caller_now(gateway: Gateway) -> None:
    key_id, key = gateway.mint_key()
    batch_id, _later = mixed_batch(gateway, key)
    before = status(gateway, batch_id, key)
    policy = gateway.new_policy(host_keys=[f"{HOST_OPENAI}-k1"])
    gateway.patch("keys", key_id, {"policy": policy["name"]})
    answer = retried(gateway, batch_id, key=key)
    view = status(gateway, answer["id"], key)
    assert view["PolicyID"] == policy["id"] != before["PolicyID"]
    assert view["RelayKeyHash"] == before["RelayKeyHash"] and view["CredentialID"] == key_id
    assert status(gateway, batch_id, key) == before  # the original keeps the policy it was submitted under
    wait_finished(gateway, answer["id"], key)


def test_another_token_of_the_same_user_retries_and_owns_the_retry(gateway: Gateway) -> None:
    """Owners as in §10.8: any token of the submitting user may retry; the retry is recorded under the
    retrying token, and a relay key (another owner) gets 404."""
    user = uniq("retrier")
    spec = {"email": f"{user}@example.com", "memberships": [{"project": gateway.project}]}
    gateway.control_write(
        "POST", "/api/apply", {"documents": [{"kind": "User", "name": user, "spec": spec}]}, 200
    )
    first, second = (mint_token(gateway, user, gateway.project) for _ in range(2))
    batch_id, _later = mixed_batch(gateway, first["token"])
    not_found(retry(gateway, batch_id))  # the module's relay key is another owner
    answer = retried(gateway, batch_id, {"errors": ["routing: "]}, key=second["token"])
    view = status(gateway, answer["id"], first["token"])  # one user's tokens are one owner
    assert view["CredentialKind"] == "token" and view["CredentialID"] == second["jti"]
    assert view["RelayKeyHash"] == status(gateway, batch_id, second["token"])["RelayKeyHash"]
    wait_finished(gateway, answer["id"], second["token"])


def test_states_and_error_prefixes_select_the_items(gateway: Gateway) -> None:
    batch_id, _later = mixed_batch(gateway)
    by_routing = retried(gateway, batch_id, {"errors": ["routing: "]})
    assert by_routing["total_items"] == 2
    assert [r["source_idx"] for r in retry_results(gateway, by_routing["id"])] == [1, 5]
    by_status = retried(gateway, batch_id, {"states": ["discarded"], "errors": ["upstream returned 4", "x"]})
    assert by_status["total_items"] == 1
    assert [r["source_idx"] for r in retry_results(gateway, by_status["id"])] == [3]
    for body in (
        {"states": ["cancelled"]},
        {"errors": ["nope"]},
        {"errors": ["%"]},
        {"errors": ["routing_"]},
    ):
        refused(retry(gateway, batch_id, body), 409, "nothing_to_retry", "no item")
    # A batch whose every item completed has nothing to retry either.
    clean = submit(gateway, "openai", [chat_item(0)])
    wait_finished(gateway, clean)
    refused(retry(gateway, clean), 409, "nothing_to_retry", "no item")


BAD_BODIES: list[tuple[Any, str]] = [
    (b"not json", "the body must be a JSON object"),
    ([1], "the body must be a JSON object"),
    ({"states": "discarded"}, "states must be a list of strings"),
    ({"states": []}, "states must not be empty"),
    ({"states": ["discarded", "completed"]}, "states[1]: unknown state 'completed'"),
    ({"states": ["failed"]}, "states[0]: unknown state 'failed'"),
    ({"states": [1]}, "states[0]: must be a string"),
    ({"errors": "routing"}, "errors must be a list of strings"),
    ({"errors": ["a", {"b": 1}]}, "errors[1]: must be a string"),
    ({"errors": []}, "errors must not be empty"),
    ({"state": ["discarded"]}, "state: unknown field"),
]


def test_refusals_name_the_field_and_write_nothing(gateway: Gateway) -> None:
    batch_id, _later = mixed_batch(gateway)
    count = gateway.sql(_count_batches())
    for body, words in BAD_BODIES:
        if isinstance(body, bytes):
            response = retry(gateway, batch_id, content=body, headers={"content-type": "application/json"})
        else:
            response = retry(gateway, batch_id, body)
        refused(response, 400, None, words)
    # Others get 404, as for an unknown id (SPEC §10.8), before the body is looked at.
    _key_id, other = gateway.mint_key()
    not_found(retry(gateway, batch_id, key=other))
    not_found(retry(gateway, batch_id, {"states": ["bogus"]}, key=other))
    not_found(retry(gateway, "b_00000000000000000000000000", key=None))
    assert retry(gateway, batch_id, headers={"authorization": "Bearer sk-relay-nope"}).status_code == 401
    assert gateway.sql(_count_batches()) == count


def _count_batches() -> Any:
    from sqlalchemy import func, select

    from relay.store.tables import batches

    return select(func.count()).select_from(batches)


def test_only_a_finished_batch_is_retried_and_cancelled_items_are_retried(gateway: Gateway) -> None:
    slow = [chat_item(i, fake={"latency_ms": 20_000}) for i in range(3)]
    batch_id = submit(gateway, "openai", slow)
    _wait_running(gateway, batch_id)
    refused(retry(gateway, batch_id), 409, "batch_not_finished", "not finished")
    cancel = gateway.client.post(f"/v1/batches/{batch_id}/cancel", headers=gateway.auth(None))
    assert cancel.status_code == 200, cancel.text
    view = wait_finished(gateway, batch_id)
    assert view["counts"] == {"cancelled": 3}, view
    refused(retry(gateway, batch_id, {"states": ["discarded"]}), 409, "nothing_to_retry", "no item")
    answer = retried(gateway, batch_id, {"states": ["cancelled"], "errors": ["cancelled"]})
    assert answer["total_items"] == 3
    # The retry holds the original bodies (their 20 s latency included): cancel it too.
    new_view = status(gateway, answer["id"])
    assert new_view["RetryOf"] == batch_id and new_view["TotalItems"] == 3
    gateway.client.post(f"/v1/batches/{answer['id']}/cancel", headers=gateway.auth(None))
    wait_finished(gateway, answer["id"])


def _wait_running(gw: Gateway, batch_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while status(gw, batch_id)["counts"].get("running", 0) == 0:
        assert time.monotonic() < deadline, status(gw, batch_id)
        time.sleep(0.1)


def test_an_idempotency_key_answers_the_first_retry_again(gateway: Gateway) -> None:
    batch_id, _later = mixed_batch(gateway)
    key = {"idempotency-key": uniq("retry")}
    first = retry(gateway, batch_id, {"errors": ["routing: "]}, headers=key)
    assert first.status_code == 202, first.text
    count = gateway.sql(_count_batches())
    again = retry(gateway, batch_id, {"errors": ["routing: "]}, headers=key)
    assert again.status_code == 202 and again.content == first.content
    assert gateway.sql(_count_batches()) == count
    reused = retry(gateway, batch_id, {"errors": ["upstream"]}, headers=key)
    refused(reused, 409, "idempotency_key_reused", "Idempotency-Key")
    # The same key on a submit is another request too.
    submitted = gateway.post(
        "/v1/batches", {"shape": "openai", "requests": [chat_item()]}, headers={**gateway.auth(None), **key}
    )
    refused(submitted, 409, "idempotency_key_reused", "Idempotency-Key")
    assert gateway.sql(_count_batches()) == count


def test_message_batches_are_retried_by_their_ids_with_custom_ids(gateway: Gateway) -> None:
    missing = uniq("nomodel")
    params = [
        {"model": MESSAGES_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        {"model": missing, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        {"model": MESSAGES_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "yo"}]},
        {"model": missing, "max_tokens": 8, "messages": [{"role": "user", "content": "yo"}]},
    ]
    body = {"requests": [{"custom_id": f"req-{i}", "params": p} for i, p in enumerate(params)]}
    created = gateway.post("/anthropic/v1/messages/batches", body)
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]
    assert batch_id.startswith("msgbatch_")
    wait_finished(gateway, batch_id)
    answer = retried(gateway, batch_id)
    assert answer["total_items"] == 2
    view = wait_finished(gateway, answer["id"])
    assert view["InboundShape"] == "anthropic" and view["RetryOf"] == batch_id
    got = results(gateway, answer["id"], jsonl=True)
    assert [(r["source_idx"], r["custom_id"]) for r in got] == [(1, "req-1"), (3, "req-3")]
    assert all(r["state"] == "discarded" and r["error"].startswith("routing: ") for r in got)


def test_openai_batches_are_retried_by_their_ids_with_custom_ids(gateway: Gateway) -> None:
    endpoint = "/v1/chat/completions"
    lines = [
        line("a", endpoint, chat_item(0)),
        line("b", endpoint, chat_item(1, fake={"status": 400})),
        line("c", endpoint, chat_item(2, model=uniq("nomodel"))),
    ]
    batch = create_openai_batch(sdk(gateway), lines, endpoint)
    wait_finished(gateway, batch.id)
    answer = retried(gateway, batch.id, {"errors": ["upstream returned"]})
    assert answer["total_items"] == 1
    wait_finished(gateway, answer["id"])
    got = retry_results(gateway, answer["id"])
    assert [(r["idx"], r["source_idx"], r["custom_id"], r["state"]) for r in got] == [
        (0, 1, "b", "discarded")
    ]


def _cli(gw: Gateway, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(RELAY_URL=gw.url, RELAY_API_KEY=gw.key)
    return subprocess.run(
        [RELAY_BIN, "batch", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_cli_retry(gateway: Gateway, tmp_path: Path) -> None:
    batch_id, _later = mixed_batch(gateway)
    done = _cli(gateway, "retry", batch_id, "--errors", "upstream returned", "--wait", cwd=tmp_path)
    assert done.returncode == 2, done.stderr  # the retried item fails again
    new_id = done.stdout.strip()
    assert new_id.startswith("b_")
    assert status(gateway, new_id)["RetryOf"] == batch_id
    assert [r["source_idx"] for r in retry_results(gateway, new_id)] == [3]
    two = _cli(gateway, "retry", batch_id, "--state", "discarded", "--errors", "routing: ", cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert [r["source_idx"] for r in retry_results(gateway, two.stdout.strip())] == [1, 5]
    bad = _cli(gateway, "retry", batch_id, "--state", "completed", cwd=tmp_path)
    assert bad.returncode == 1 and "states[0]" in bad.stderr and bad.stdout == ""
    none = _cli(gateway, "retry", batch_id, "--errors", "nope", cwd=tmp_path)
    assert none.returncode == 1 and "409" in none.stderr
