"""The OpenAI Batches façade across relay restarts (SPEC §14, §10.4, §10.6): causes that need a change
between create and run (``credential_invalid``, ``policy_unavailable``) or a short item timeout
(``request_timeout``), and a restart while batches are ``finalizing`` — one waiting, one claimed by a
replica that died — which still end ``completed`` with their files, each file written once.

Three processes per backend on one database and payload directory: ``front`` (no workers) takes the
creates whose credential or policy then changes; ``workers`` (finalizing every hour only, 1.5 s item
timeout) runs every item, so the batches stop at ``finalizing``; ``final`` (the default finalizer)
writes the files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from relay.store import tables as t
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import HOST_OPENAI, Gateway, Reaper, backend_setup
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import item_events, mint_token
from tests.integration.openai_batches.helpers import (
    body_for,
    create,
    file_lines,
    line,
    new_user,
    raw,
    sdk,
    wait_ended,
)

CHAT = "/v1/chat/completions"
ITEM_TIMEOUT_S = 1.5
POLICY_OFF = "oa-pol-off"


@dataclass
class Stage:
    gw: Gateway  # the ``final`` process
    ids: dict[str, str]  # case → batch id
    readers: dict[str, str]  # case → a credential that reads it
    finalizing_seen: dict[str, str]  # case → the status read while ``workers`` ran


def _wait_status(gw: Gateway, batch_id: str, key: str, wanted: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        shown = raw(gw, "GET", f"/batches/{batch_id}", key).json()
        if shown["status"] == wanted:
            return dict(shown)
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stage(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Stage]:
    backend = request.param
    workdir: Path = tmp_path_factory.mktemp(f"openai-restart-{backend}")
    database_url, redis_url, env = backend_setup(backend, workdir)
    env["RELAY_BATCH_PAYLOAD_DIR"] = str(workdir / "payloads")
    front = RelayProcess(workdir / "front", database_url, {**env, "RELAY_BATCH_WORKERS": "0"})
    workers = RelayProcess(
        workdir / "workers",
        database_url,
        {**env, "RELAY_BATCH_ITEM_TIMEOUT_S": str(ITEM_TIMEOUT_S), "RELAY_BATCH_FINALIZE_POLL_S": "3600"},
    )
    final = RelayProcess(workdir / "final", database_url, {**env, "RELAY_BATCH_FINALIZE_POLL_S": "0.2"})
    processes = [front, workers, final]
    try:
        front.start()
        gw = Gateway(front, fake_upstream, backend, redis_url)
        gw.apply_catalog()
        ids, readers = _stage(gw)
        live_reaper.stop([front])
        processes.remove(front)

        workers.start()
        gw = gw.sharing(workers)
        slow = body_for(CHAT, 0, fake={"latency_ms": 4000})
        ids["timeout"] = create(sdk(gw), [line("slow", CHAT, slow), line("fast", CHAT, body_for(CHAT, 1))]).id
        readers["timeout"] = gw.key
        ids["claimed"] = create(sdk(gw), [line("c", CHAT, body_for(CHAT, 2))]).id
        readers["claimed"] = gw.key
        seen = {case: _wait_status(gw, ids[case], readers[case], "finalizing")["status"] for case in ids}
        live_reaper.stop([workers])
        processes.remove(workers)
        live_reaper.join()
        # A replica that died while writing the files of "claimed" left its claim behind.
        gw.sql(update(t.batches).where(t.batches.c.id == ids["claimed"]).values(api_status="fin@1"))

        final.start()
        yield Stage(gw.sharing(final), ids, readers, seen)
    finally:
        live_reaper.stop(processes, database_url if backend == "postgres" else None)


def _stage(gw: Gateway) -> tuple[dict[str, str], dict[str, str]]:
    docs = [
        {"kind": "Policy", "name": POLICY_OFF, "spec": {"models": ["*"], "host_keys": [f"{HOST_OPENAI}-k1"]}}
    ]
    gw.control_write("POST", "/api/apply", {"documents": docs}, 200)
    user = new_user(gw)
    revoked = mint_token(gw, user, gw.project)
    body = {"principal_kind": "serviceaccount", "principal": gw.account, "policy": POLICY_OFF}
    off_key = gw.control_write("POST", "/api/keys", body, 201).json()["plaintext"]
    lines = [line(f"x{i}", CHAT, body_for(CHAT, i)) for i in range(2)]
    ids = {
        "credential": create(sdk(gw, revoked["token"]), lines).id,
        "policy": create(sdk(gw, off_key), lines).id,
        "waiting": create(sdk(gw), lines).id,
    }
    gw.control_write("DELETE", f"/api/tokens/{revoked['jti']}", None, 200)
    gw.control_write("PATCH", f"/api/policies/{POLICY_OFF}", {"enabled": False}, 200)
    readers = {"credential": mint_token(gw, user, gw.project)["token"], "policy": off_key, "waiting": gw.key}
    return ids, readers


def _ended(stage: Stage, case: str) -> Any:
    return wait_ended(sdk(stage.gw, stage.readers[case]), stage.ids[case])


@pytest.mark.parametrize(
    ("case", "code", "prefix"),
    [
        ("credential", "credential_invalid", "credential no longer valid: "),
        ("policy", "policy_unavailable", "policy unavailable: "),
    ],
)
def test_credential_and_policy_causes_in_the_error_file(
    stage: Stage, case: str, code: str, prefix: str
) -> None:
    done = _ended(stage, case)
    assert done.status == "completed" and done.output_file_id is None
    errors = file_lines(sdk(stage.gw, stage.readers[case]), done.error_file_id)
    assert [item["custom_id"] for item in errors] == ["x0", "x1"]
    for item in errors:
        assert item["response"] is None and item["error"]["code"] == code
        assert item["error"]["message"].startswith(prefix)
    assert len(item_events(stage.gw, stage.ids[case], 2)) == 2


def test_timeout_in_the_error_file(stage: Stage) -> None:
    done = _ended(stage, "timeout")
    client = sdk(stage.gw)
    assert [o["custom_id"] for o in file_lines(client, done.output_file_id)] == ["fast"]
    (error,) = file_lines(client, done.error_file_id)
    assert error["custom_id"] == "slow" and error["error"]["code"] == "request_timeout"
    assert error["error"]["message"].startswith("timeout: ")


@pytest.mark.parametrize("case", ["waiting", "claimed"])
def test_a_restart_during_finalizing_still_ends_completed_with_its_files(stage: Stage, case: str) -> None:
    assert stage.finalizing_seen[case] == "finalizing"  # the files were not written before the restart
    done = _ended(stage, case)
    assert done.status == "completed" and done.finalizing_at is not None and done.completed_at is not None
    assert done.output_file_id is not None and done.error_file_id is None
    assert len(file_lines(sdk(stage.gw), done.output_file_id)) == done.request_counts.total  # type: ignore[union-attr]
    written = stage.gw.sql(
        select(func.count())
        .select_from(t.files)
        .where(t.files.c.filename == f"{stage.ids[case]}_output.jsonl"),
    )
    assert written == 1  # written once
