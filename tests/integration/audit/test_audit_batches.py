"""The admin's batch changes are audited (SPEC §21) on a real gateway, SQLite and Postgres: ``POST
/api/batches/{id}/cancel`` appends one ``cancel`` entry (a repeated cancel, which changes nothing,
none) and ``DELETE /api/batches/{id}`` one ``delete`` entry; a refused deletion appends nothing."""

from __future__ import annotations

from tests.fixtures.live import Gateway
from tests.integration.audit.helpers import appended_by, summary
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished


def test_admin_cancel_and_delete_append_their_entries(gateway: Gateway) -> None:
    relay = gateway.relay
    slow = submit(gateway, "openai", [chat_item(i, fake={"latency_ms": 300}) for i in range(40)])
    refused = relay.control.delete(f"/api/batches/{slow}")
    assert refused.status_code == 409 and appended_by(relay, refused) == []

    cancel = relay.control.post(f"/api/batches/{slow}/cancel")
    assert cancel.status_code == 200, cancel.text
    [entry] = appended_by(relay, cancel)
    assert (entry["action"], entry["kind"], entry["ref"]) == ("cancel", "Batch", slow)
    assert entry["actor"] == {"kind": "admin_token"}
    again = relay.control.post(f"/api/batches/{slow}/cancel")
    assert again.status_code == 200 and appended_by(relay, again) == []

    wait_finished(gateway, slow)
    deleted = relay.control.delete(f"/api/batches/{slow}")
    assert deleted.status_code == 204, deleted.text
    assert summary(appended_by(relay, deleted)) == [("delete", "Batch", slow)]
    assert relay.control.get("/api/audit/verify").json()["ok"] is True
