"""SPEC §18 for batches and the control plane: the create's server span names its batch and is linked
from every item's own trace (root ``batch.item``, attempts below it); items of an unsampled create are
not traced; the §14/§15 APIs and the control plane's writes are a server span each."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import text

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan
from tests.integration.tracing.helpers import Traced, traced

CHAT = {"messages": [{"role": "user", "content": "hello batch"}]}
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"


def _items(spans: list[ReceivedSpan], batch_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == "batch.item" and s.attributes.get("relay.batch_id") == batch_id]


async def _submit(t: Traced, requests: list[dict[str, Any]], **headers: str) -> Any:
    submitted = await t.post("/v1/batches", {"shape": "openai", "requests": requests}, **headers)
    assert submitted.status_code == 202, submitted.text
    return submitted


async def test_items_are_traces_of_their_own_linked_to_the_create(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver, batch_workers=2) as t:
        requests = [
            {"model": "chat", **CHAT},  # completed
            {"model": "flaky", **CHAT},  # completed after a failover: two attempts
            {"model": "chat", **CHAT, "fake": {"status": 400}},  # discarded: the upstream said 400
            {"model": "no-such-model", **CHAT},  # discarded before any upstream call
        ]
        submitted = await _submit(t, requests)
        batch_id = submitted.json()["id"]
        spans = await receiver.until(lambda got: len(_items(got, batch_id)) == 4)
        [create] = [s for s in spans if s.kind == "SERVER" and s.attributes.get("relay.batch_id") == batch_id]
        assert create.name == "POST /v1/batches"
        assert create.attributes["relay.batch_items"] == 4
        assert create.attributes["http.response.status_code"] == 202
        assert create.attributes["relay.request_id"] == submitted.headers["x-relay-request-id"]
        by_idx = {s.attributes["relay.batch_item_idx"]: s for s in _items(spans, batch_id)}
        for item in by_idx.values():
            assert item.parent_span_id == "" and item.trace_id != create.trace_id  # its own trace
            assert item.links == [(create.trace_id, create.span_id)]
        states = {idx: (s.attributes["relay.batch_item_state"], s.error) for idx, s in by_idx.items()}
        assert states == {
            0: ("completed", False),
            1: ("completed", False),
            2: ("discarded", True),
            3: ("discarded", True),
        }

        def attempts(idx: int) -> list[ReceivedSpan]:
            item = by_idx[idx]
            found = [s for s in receiver.trace(item.trace_id) if s.kind == "CLIENT"]
            assert all(a.parent_span_id == item.span_id for a in found)
            return sorted(found, key=lambda a: a.attributes["relay.attempt"])

        [ok] = attempts(0)
        assert ok.name == "chat up-chat" and ok.attributes["gen_ai.usage.output_tokens"] > 0
        assert [a.attributes.get("error.type") for a in attempts(1)] == ["500", None]
        [bad] = attempts(2)
        assert bad.error and bad.attributes["error.type"] == "400"
        assert attempts(3) == []  # refused before any upstream call
        async with t.planes.runtime.engine.connect() as conn:
            row = (await conn.execute(text("SELECT trace_parent FROM batches"))).scalar_one()
        assert row == f"00-{create.trace_id}-{create.span_id}-01"


async def test_items_of_an_unsampled_create_are_not_traced(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver, batch_workers=2) as t:
        submitted = await _submit(t, [{"model": "chat", **CHAT}] * 2, traceparent=PARENT + "0")
        batch_id = submitted.json()["id"]
        auth = {"authorization": f"Bearer {t.relay_key}"}
        for _ in range(600):
            view = (await t.planes.inference.get(f"/v1/batches/{batch_id}?items=false", headers=auth)).json()
            if view.get("CompletedAt"):
                break
            await asyncio.sleep(0.05)
        assert view["CompletedAt"], view
        # A traced request after it: once it is exported, anything of the batch would have been too.
        marker = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
        t.request_trace(marker.headers["x-relay-request-id"])
    assert not any(s.attributes.get("relay.batch_id") == batch_id for s in receiver.spans)
    assert not any(s.name == "batch.item" for s in receiver.spans)
    assert len(fake.requests()) >= 2  # the items did run


async def test_openai_and_anthropic_batch_apis_and_control_writes_are_server_spans(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver, batch_workers=2) as t:
        auth = {"authorization": f"Bearer {t.relay_key}"}
        # §15: a message batch create names its batch; its items are linked to it.
        created = await t.planes.inference.post(
            "/anthropic/v1/messages/batches",
            json={"requests": [{"custom_id": "a", "params": {"model": "anth", "max_tokens": 9, **CHAT}}]},
            headers=auth,
        )
        assert created.status_code == 200, created.text
        mb_id = created.json()["id"]
        spans = await receiver.until(lambda got: len(_items(got, mb_id)) == 1)
        [create] = [s for s in spans if s.attributes.get("relay.batch_id") == mb_id and s.kind == "SERVER"]
        assert (
            create.name == "POST /anthropic/v1/messages/batches"
            and create.attributes["relay.batch_items"] == 1
        )
        assert _items(spans, mb_id)[0].links == [(create.trace_id, create.span_id)]
        # §14: the Files upload and the batch create are server spans; so is a read of a batch API.
        line = {
            "custom_id": "x",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "chat", **CHAT},
        }
        uploaded = await t.planes.inference.post(
            "/openai/v1/files",
            files={"file": ("in.jsonl", orjson.dumps(line) + b"\n")},
            data={"purpose": "batch"},
            headers=auth,
        )
        assert uploaded.status_code == 200, uploaded.text
        made = await t.planes.inference.post(
            "/openai/v1/batches",
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
            headers=auth,
        )
        assert made.status_code == 200, made.text
        read = await t.planes.inference.get(f"/openai/v1/batches/{made.json()['id']}", headers=auth)
        assert read.status_code == 200
        spans = await receiver.until(
            lambda got: any(s.name.startswith("GET /openai/v1/batches/") for got_s in [got] for s in got_s)
        )
        names = {s.name for s in spans if s.kind == "SERVER"}
        assert {
            "POST /openai/v1/files",
            "POST /openai/v1/batches",
            f"GET /openai/v1/batches/{made.json()['id']}",
        } <= names
        [oa] = [s for s in spans if s.name == "POST /openai/v1/batches"]
        assert (
            oa.attributes["relay.batch_id"] == made.json()["id"] and oa.attributes["relay.batch_items"] == 1
        )

        # The control plane: writes are server spans (with their status), reads are not.
        receiver.clear()
        wrote = await t.planes.control.post("/api/teams", json={"name": "traced-team"})
        assert wrote.status_code == 201
        refused = await t.planes.control.post("/api/teams", json={"name": "traced-team"})
        assert refused.status_code == 409
        assert (await t.planes.control.get("/api/teams")).status_code == 200
        deleted = await t.planes.control.delete("/api/teams/traced-team")
        assert deleted.status_code in (200, 204)

        def control(got: list[ReceivedSpan]) -> list[ReceivedSpan]:
            return [s for s in got if s.attributes.get("url.path", "").startswith("/api/")]

        spans = control(await receiver.until(lambda got: len(control(got)) >= 3))
        assert [(s.name, s.attributes["http.response.status_code"]) for s in spans] == [
            ("POST /api/teams", 201),
            ("POST /api/teams", 409),
            ("DELETE /api/teams/traced-team", deleted.status_code),
        ]
        assert all(
            s.kind == "SERVER" and s.attributes["http.request.method"] in ("POST", "DELETE") for s in spans
        )
