"""The engine's APIs over HTTP against ``relay serve`` (SQLite and Postgres): the §10.10 list, every
API's batches under their own ids, ``Idempotency-Key``, an ``openai_embeddings`` item through the live
embeddings path, and expiry. Batches of the other APIs are created with the engine's own create
(``BatchService.create``) on the server's database and payload directory; the server's workers run them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from relay.batches.new_batch import Answer, CreatedBatch, NewBatch
from relay.batches.service import BatchService
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.request.auth import Principal
from relay.snapshot import Policy
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from relay.store.engine import create_engine
from tests.fixtures.live import EMBED_MODEL, Gateway, uniq
from tests.integration.batch_api.helpers import (
    chat_item,
    item_events,
    mint_token,
    results,
    status,
    submit,
    wait_finished,
)

LIST_KEYS = {"ID", "InboundShape", "Status", "TotalItems", "CreatedAt", "CompletedAt", "counts"}


def engine_create(gw: Gateway, like: str, new: NewBatch, key: str | None = None) -> str:
    """Create ``new`` with the engine's create, attributed like the §10 batch ``like`` (same owner)."""
    view = status(gw, like, key)
    policy = Policy(view["PolicyID"], "unused", (), (), "prioritized", (), False, True)
    principal = Principal(
        policy=policy,
        project_id=view["ProjectID"],
        team_id=view["TeamID"],
        principal_kind=view["PrincipalKind"],
        principal_id=view["PrincipalID"],
        credential_kind=view["CredentialKind"],
        credential_id=view["CredentialID"],
        key_hash=view["RelayKeyHash"],
        owner=view["RelayKeyHash"],
        key_payload_logging=False,
    )
    assert view["CredentialKind"] == "key"

    async def go() -> str:
        engine = create_engine(gw.relay.database_url)
        try:
            stores = PayloadStores(
                FileStore(Path(gw.relay.workdir) / "relay-batch-payloads"), DatabaseStore(engine), "files"
            )
            created: list[CreatedBatch] = []

            def render(batch: CreatedBatch) -> Answer:
                created.append(batch)
                return Answer(200, b"{}")

            await BatchService(BatchStore(engine), stores, max_items=50_000).create(principal, new, render)
            return created[0].id
        finally:
            await engine.dispose()

    return asyncio.run(go())


def listing(gw: Gateway, key: str | None = None, **params: Any) -> dict[str, Any]:
    response = gw.client.get("/v1/batches", headers=gw.auth(key), params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"batches", "next_cursor"}
    return dict(body)


def all_ids(gw: Gateway, key: str | None = None, limit: int = 2) -> list[str]:
    ids: list[str] = []
    after: str | None = None
    while True:
        page = listing(gw, key, limit=limit, **({"after": after} if after else {}))
        ids += [b["ID"] for b in page["batches"]]
        assert len(page["batches"]) <= limit
        after = page["next_cursor"]
        if after is None:
            return ids
        assert after == page["batches"][-1]["ID"]


def test_list_pages_newest_first_with_every_api_and_the_owner_rule(gateway: Gateway) -> None:
    _, key = gateway.mint_key()
    mine = [submit(gateway, "openai", [chat_item(i)], key=key) for i in range(3)]
    openai_id = engine_create(
        gateway,
        mine[0],
        NewBatch(api="openai", shape="openai", requests=[chat_item(9)], custom_ids=["x"]),
        key,
    )
    anthropic_id = engine_create(
        gateway, mine[0], NewBatch(api="anthropic", shape="openai", requests=[chat_item(8)]), key
    )
    assert openai_id.startswith("batch_") and anthropic_id.startswith("msgbatch_")
    expected = [anthropic_id, openai_id, *reversed(mine)]
    assert all_ids(gateway, key, limit=2) == expected
    assert all_ids(gateway, key, limit=100) == expected
    wait_finished(gateway, openai_id, key)  # the other APIs' ids are read like any batch's
    first = listing(gateway, key, limit=1)
    assert first["next_cursor"] == anthropic_id and set(first["batches"][0]) == LIST_KEYS
    row = next(b for b in listing(gateway, key)["batches"] if b["ID"] == openai_id)
    assert row["InboundShape"] == "openai" and row["TotalItems"] == 1 and row["Status"] == "queued"
    assert row["counts"] == {"completed": 1} and row["CompletedAt"] is not None
    assert listing(gateway, key)["next_cursor"] is None  # 5 batches, default limit 20
    # Another key of the same account owns none of them, and cannot page from them.
    _, other = gateway.mint_key()
    assert listing(gateway, other) == {"batches": [], "next_cursor": None}
    foreign = gateway.client.get("/v1/batches", headers=gateway.auth(other), params={"after": mine[1]})
    assert foreign.status_code == 400 and "after" in foreign.json()["error"]["message"]


@pytest.mark.parametrize("limit", ["", "0", "101", "x", "1.5", "-1", "٣"])
def test_list_limit_errors_name_limit(gateway: Gateway, limit: str) -> None:
    response = gateway.client.get("/v1/batches", headers=gateway.auth(None), params={"limit": limit})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "limit" in error["message"]


def test_list_one_users_tokens_are_one_owner(gateway: Gateway) -> None:
    user = uniq("lister")
    spec = {"email": f"{user}@example.com", "memberships": [{"project": gateway.project}]}
    gateway.control_write(
        "POST", "/api/apply", {"documents": [{"kind": "User", "name": user, "spec": spec}]}, 200
    )
    first, second = (mint_token(gateway, user, gateway.project)["token"] for _ in range(2))
    batch_id = submit(gateway, "openai", [chat_item()], key=first)
    assert [b["ID"] for b in listing(gateway, second)["batches"]] == [batch_id]
    assert batch_id not in [b["ID"] for b in listing(gateway)["batches"]]


def test_list_and_create_refuse_other_methods_with_allow(gateway: Gateway) -> None:
    response = gateway.client.delete("/v1/batches", headers=gateway.auth(None))
    assert response.status_code == 405 and response.headers["allow"] == "GET, POST"
    response = gateway.client.get("/v1/batches/b_x/cancel", headers=gateway.auth(None))
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def owned_count(gw: Gateway, owner: str) -> int:
    return int(gw.sql(select(func.count()).select_from(t.batches).where(t.batches.c.owner == owner)))


def idem(gw: Gateway, body: Any, key_header: Any, key: str | None = None) -> Any:
    headers = {**gw.auth(key), "idempotency-key": key_header}
    return gw.client.post("/v1/batches", json=body, headers=headers)


def test_idempotency_key_answers_the_first_answer_and_creates_nothing(gateway: Gateway) -> None:
    _, key = gateway.mint_key()
    body = {"shape": "openai", "requests": [chat_item(1), chat_item(2)]}
    first = idem(gateway, body, "order-1", key)
    assert first.status_code == 202, first.text
    owner = status(gateway, first.json()["id"], key)["RelayKeyHash"]
    again = idem(gateway, body, "order-1", key)
    assert (again.status_code, again.content) == (202, first.content)  # verbatim
    assert owned_count(gateway, owner) == 1
    reused = idem(gateway, {**body, "requests": [chat_item(3)]}, "order-1", key)
    assert reused.status_code == 409, reused.text
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert owned_count(gateway, owner) == 1
    # Another owner may use the same key independently.
    _, other = gateway.mint_key()
    theirs = idem(gateway, body, "order-1", other)
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]
    # Past the 24 h window the key creates again.
    gateway.sql(
        update(t.idempotency_keys)
        .where(t.idempotency_keys.c.owner == owner)
        .values(created_at=datetime.now(UTC) - timedelta(hours=25)),
    )
    later = idem(gateway, body, "order-1", key)
    assert later.status_code == 202 and later.json()["id"] != first.json()["id"]
    assert owned_count(gateway, owner) == 2


@pytest.mark.parametrize("value", ["", "k" * 256, b"caf\xc3\xa9", "tab\there"])
def test_bad_idempotency_keys_are_400_and_write_nothing(gateway: Gateway, value: Any) -> None:
    _, key = gateway.mint_key()
    body = {"shape": "openai", "requests": [chat_item()]}
    response = idem(gateway, body, value, key)
    assert response.status_code == 400, response.text
    assert "Idempotency-Key" in response.json()["error"]["message"]
    assert listing(gateway, key)["batches"] == []


def test_the_longest_key_is_accepted(gateway: Gateway) -> None:
    _, key = gateway.mint_key()
    body = {"shape": "openai", "requests": [chat_item()]}
    assert idem(gateway, body, "~" * 255, key).status_code == 202


def test_concurrent_duplicates_resolve_to_the_first_answer(gateway: Gateway) -> None:
    _, key = gateway.mint_key()
    body = {"shape": "openai", "requests": [chat_item(i) for i in range(50)]}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: idem(gateway, body, "race", key), range(8)))
    assert {(a.status_code, a.content) for a in answers} == {(202, answers[0].content)}
    owner = status(gateway, answers[0].json()["id"], key)["RelayKeyHash"]
    assert owned_count(gateway, owner) == 1


def test_an_openai_embeddings_item_runs_like_a_live_embeddings_request(gateway: Gateway) -> None:
    like = submit(gateway, "openai", [chat_item()])
    item = {"model": EMBED_MODEL, "input": ["one", "two"]}
    batch_id = engine_create(
        gateway, like, NewBatch(api="openai", shape="openai_embeddings", requests=[item], custom_ids=["e1"])
    )
    view = wait_finished(gateway, batch_id)
    assert view["counts"] == {"completed": 1} and view["InboundShape"] == "openai_embeddings"
    [result] = results(gateway, batch_id)
    assert result["state"] == "completed"
    assert [d["index"] for d in result["response"]["data"]] == [0, 1]
    [event] = item_events(gateway, batch_id, 1).values()
    assert event["status"] == 200 and event["error_kind"] is None and event["cost_nanos"] is not None
    assert event["input_tokens"] > 0


def test_an_embeddings_item_on_a_non_openai_binding_is_cross_shape(gateway: Gateway) -> None:
    like = submit(gateway, "openai", [chat_item()])
    item = {"model": "live-claude", "input": "x"}
    batch_id = engine_create(
        gateway, like, NewBatch(api="openai", shape="openai_embeddings", requests=[item])
    )
    wait_finished(gateway, batch_id)
    [result] = results(gateway, batch_id)
    assert result["error"] == "cross-shape dispatch: item shape openai_embeddings, binding adapter anthropic"


def test_expiry_cancels_waiting_and_running_items_as_expired(gateway: Gateway) -> None:
    like = submit(gateway, "openai", [chat_item()])
    n = 40
    slow = [chat_item(i, fake={"latency_ms": 4000}) for i in range(n)]
    later = datetime.now(UTC) + timedelta(hours=1)
    batch_id = engine_create(
        gateway, like, NewBatch(api="openai", shape="openai", requests=slow, expires_at=later)
    )
    deadline = time.monotonic() + 10
    while status(gateway, batch_id)["counts"].get("running", 0) == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    gateway.sql(
        update(t.batches)
        .where(t.batches.c.id == batch_id)
        .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)),
    )
    view = wait_finished(gateway, batch_id, timeout=20)
    assert view["Status"] == "queued"  # expiry is not a cancel
    rows = results(gateway, batch_id)
    not_done = [r for r in rows if r["state"] != "completed"]
    assert len(not_done) >= n - 16 and all(r["state"] == "cancelled" for r in not_done)
    assert all(r["error"].startswith("expired: batch expired at ") for r in not_done)
    events = item_events(gateway, batch_id, n)  # exactly one usage event per item
    assert {events[r["idx"]]["error_kind"] for r in not_done} == {"expired"}
