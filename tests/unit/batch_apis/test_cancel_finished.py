"""A cancel that comes after a batch finished changes nothing (SPEC §10.2: ``Status`` turns
``cancelled`` only by a cancel before the end, ``CompletedAt`` is set once; §10.5: the cancel answers
200, idempotently), through every door: the owner's ``/v1/batches/{id}/cancel``, the admin's
``/api/batches/{id}/cancel`` and the Anthropic façade (an ended Message Batch is answered as it is).
In process: a real runtime with batch workers on SQLite, items answered by the session's fake upstream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.runtime import Planes, running

MODEL = "cf-model"


@pytest.fixture
async def relay(tmp_path: Path, fake: FakeUpstream) -> AsyncIterator[tuple[Planes, dict[str, str]]]:
    async with running(tmp_path, batch_workers=2) as planes:
        key = await planes.relay_key(base_url=fake.base_url, prefix="cf")
        yield planes, {"Authorization": f"Bearer {key}"}


async def _eventually(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _chat(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


async def _finished_batch(planes: Planes, auth: dict[str, str]) -> dict[str, Any]:
    submitted = await planes.inference.post(
        "/v1/batches", headers=auth, json={"shape": "openai", "requests": [_chat("a"), _chat("b")]}
    )
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["id"]

    async def finished() -> dict[str, Any] | None:
        view = (await planes.inference.get(f"/v1/batches/{batch_id}?items=false", headers=auth)).json()
        return view if view["CompletedAt"] is not None else None

    view: dict[str, Any] = await _eventually("the batch to finish", finished)
    assert view["Status"] == "queued" and view["counts"] == {"completed": 2}, view
    return view


async def test_the_owners_and_the_admins_cancel_leave_a_finished_batch_as_it_is(
    relay: tuple[Planes, dict[str, str]],
) -> None:
    planes, auth = relay
    before = await _finished_batch(planes, auth)
    path = f"/v1/batches/{before['ID']}"
    for _ in range(2):  # idempotent
        cancelled = await planes.inference.post(f"{path}/cancel", headers=auth)
        assert (cancelled.status_code, cancelled.json()) == (200, {"status": "cancelled"})
        admin = await planes.control.post(f"/api/batches/{before['ID']}/cancel")
        assert admin.status_code == 200, admin.text
    after = (await planes.inference.get(f"{path}?items=false", headers=auth)).json()
    assert (after["Status"], after["CompletedAt"], after["counts"]) == (
        "queued",
        before["CompletedAt"],
        before["counts"],
    )
    listed = (await planes.inference.get("/v1/batches", headers=auth)).json()["batches"]
    assert [(b["ID"], b["Status"]) for b in listed] == [(before["ID"], "queued")]
    events = (await planes.control.get(f"/api/usage/events?batch_id={before['ID']}")).json()["events"]
    assert sorted(e["error_kind"] or "" for e in events) == ["", ""]  # no cancel event was written


async def test_an_ended_message_batch_is_answered_as_it_is(relay: tuple[Planes, dict[str, str]]) -> None:
    planes, auth = relay
    headers = {**auth, "anthropic-version": "2023-06-01"}
    path = "/anthropic/v1/messages/batches"
    # An openai-adapter model serves no anthropic item: it ends errored (cross-shape), which is an end.
    params = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    created = await planes.inference.post(
        path, headers=headers, json={"requests": [{"custom_id": "a", "params": params}]}
    )
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]

    async def ended() -> dict[str, Any] | None:
        shown = (await planes.inference.get(f"{path}/{batch_id}", headers=headers)).json()
        return shown if shown["processing_status"] == "ended" else None

    before = await _eventually("the message batch to end", ended)
    answer = await planes.inference.post(f"{path}/{batch_id}/cancel", headers=headers)
    assert answer.status_code == 200, answer.text
    shown = answer.json()
    assert (shown["processing_status"], shown["cancel_initiated_at"], shown["ended_at"]) == (
        "ended",
        None,
        before["ended_at"],
    )
    assert shown["request_counts"] == before["request_counts"]
    again = (await planes.inference.get(f"{path}/{batch_id}", headers=headers)).json()
    assert again == before
