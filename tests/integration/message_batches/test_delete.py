"""``DELETE /v1/messages/batches/{id}`` on the files payload store (SPEC §15, §10.7): the batch's payload
directory goes with its rows, once the delete has answered; another batch's files, one still running
included, stay whole, and a delete whose file removal never happened (a crash after the rows went)
leaves its directory behind without touching anyone else's."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import delete

from relay.store import tables as t
from tests.fixtures.live import Gateway
from tests.integration.message_batches.helpers import (
    NOT_FOUND,
    PATH,
    jsonl,
    raw,
    request,
    sdk,
    slow,
    wait_ended,
)


def payload_dir(gw: Gateway, batch_id: str) -> Path:
    """Where the relay keeps the batch's bodies (``RELAY_BATCH_PAYLOAD_DIR``'s default, in its workdir)."""
    return gw.relay.workdir / "relay-batch-payloads" / batch_id


def test_delete_removes_the_batch_files_and_no_other_batch_s(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    client = sdk(gw)
    deleted = client.messages.batches.create(requests=[request(f"d{i}", i) for i in range(3)])  # type: ignore[misc]
    kept = client.messages.batches.create(requests=[request(f"k{i}", i) for i in range(3)])  # type: ignore[misc]
    wait_ended(client, deleted.id, 3)
    wait_ended(client, kept.id, 3)
    running = client.messages.batches.create(requests=[slow("busy")])  # type: ignore[list-item]
    files = {
        b: sorted(p.name for p in payload_dir(gw, b).iterdir()) for b in (deleted.id, kept.id, running.id)
    }
    assert any(name.startswith("responses-") for name in files[deleted.id]), files  # it had responses
    assert "requests.jsonl" in files[running.id], files

    answer = raw(gw, "DELETE", f"{PATH}/{deleted.id}")
    assert answer.status_code == 200 and answer.json() == {"id": deleted.id, "type": "message_batch_deleted"}
    assert not payload_dir(gw, deleted.id).exists()  # gone once the delete answered
    assert raw(gw, "GET", f"{PATH}/{deleted.id}").json() == NOT_FOUND

    # The other batches' files are as they were, and their bodies still read.
    assert sorted(p.name for p in payload_dir(gw, kept.id).iterdir()) == files[kept.id]
    lines = jsonl(raw(gw, "GET", f"{PATH}/{kept.id}/results"))
    assert [(line["custom_id"], line["result"]["type"]) for line in lines] == [
        (f"k{i}", "succeeded") for i in range(3)
    ]
    assert all(line["result"]["message"]["type"] == "message" for line in lines)
    assert client.messages.batches.retrieve(running.id).processing_status == "in_progress"
    client.messages.batches.cancel(running.id)
    wait_ended(client, running.id, 1)
    assert payload_dir(gw, running.id).is_dir()
    assert [r.result.type for r in client.messages.batches.results(running.id)] == ["canceled"]


def test_a_delete_that_never_removed_its_files_touches_no_other_batch(mb_gateway: Gateway) -> None:
    """A crash between the rows' delete and the files' removal: the rows are gone (404), the directory
    stays behind unread; a later delete of another batch removes that batch's directory only."""
    gw = mb_gateway
    client = sdk(gw)
    crashed = client.messages.batches.create(requests=[request("c0")])  # type: ignore[list-item]
    later = client.messages.batches.create(requests=[request("l0")])  # type: ignore[list-item]
    bystander = client.messages.batches.create(requests=[request("b0")])  # type: ignore[list-item]
    for batch in (crashed, later, bystander):
        wait_ended(client, batch.id, 1)
    gw.sql(delete(t.batch_items).where(t.batch_items.c.batch_id == crashed.id))  # the rows only, as a
    gw.sql(delete(t.batches).where(t.batches.c.id == crashed.id))  # delete that crashed after COMMIT
    assert raw(gw, "GET", f"{PATH}/{crashed.id}").json() == NOT_FOUND
    left_behind = sorted(p.name for p in payload_dir(gw, crashed.id).iterdir())

    assert raw(gw, "DELETE", f"{PATH}/{later.id}").status_code == 200
    assert not payload_dir(gw, later.id).exists()
    assert sorted(p.name for p in payload_dir(gw, crashed.id).iterdir()) == left_behind
    results = jsonl(raw(gw, "GET", f"{PATH}/{bystander.id}/results"))
    assert [(r["custom_id"], r["result"]["type"]) for r in results] == [("b0", "succeeded")]
