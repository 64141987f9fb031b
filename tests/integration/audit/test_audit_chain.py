"""The audit log's hash chain and its readers (SPEC §21), through a real ``relay serve`` on SQLite and
Postgres: ``GET /api/audit/verify`` recomputes the chain, then finds each of three tamperings made in
the database (an edited entry, a removed one, one inserted) at the right entry; many concurrent
writers still form one chain; the filters, keyset pages and their 400s; ``relay audit export``."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.relay_server import ADMIN_TOKEN, RELAY_BIN, RelayProcess
from tests.integration.audit.helpers import all_entries, sql, uniq


def verify(relay: RelayProcess) -> dict[str, Any]:
    response = relay.control.get("/api/audit/verify")
    assert response.status_code == 200, response.text
    return dict(response.json())


def some_changes(relay: RelayProcess, n: int) -> list[str]:
    names = [uniq("t") for _ in range(n)]
    for name in names:
        assert relay.api("POST", "/api/teams", {"name": name}).status_code == 201
    return names


def recomputed(entry: dict[str, Any]) -> str:
    """The hash as SPEC §21 defines it, written out here independently of Relay's code."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256((entry["prev_hash"] + text).encode()).hexdigest()


def test_the_chain_links_every_entry_and_verifies(relay: RelayProcess) -> None:
    some_changes(relay, 5)
    relay.api("PATCH", "/api/teams/" + some_changes(relay, 1)[0], {"display_name": "Équipe ünïcode"})
    entries = list(reversed(all_entries(relay)))
    assert entries[0]["prev_hash"] == "0" * 64
    for previous, entry in itertools.pairwise(entries):
        assert entry["prev_hash"] == previous["hash"]
    for entry in entries:
        assert entry["hash"] == recomputed(entry)
    assert verify(relay) == {"ok": True, "entries": len(entries), "first_bad": None}


def test_tampering_is_found_at_the_right_entry(relay: RelayProcess) -> None:
    some_changes(relay, 4)
    entries = list(reversed(all_entries(relay)))
    seqs = {r.id: r.seq for r in sql(relay, "SELECT id, seq FROM audit_entries")}
    target, after = entries[-3], entries[-2]

    # 1. An edited entry: its stored hash no longer matches its content.
    original = sql(relay, "SELECT after FROM audit_entries WHERE id = :id", id=target["id"])[0][0]
    sql(
        relay,
        "UPDATE audit_entries SET after = :v WHERE id = :id",
        v=original.replace("t-", "x-"),
        id=target["id"],
    )
    assert verify(relay) == {"ok": False, "entries": len(entries), "first_bad": target["id"]}
    sql(relay, "UPDATE audit_entries SET after = :v WHERE id = :id", v=original, id=target["id"])
    assert verify(relay)["ok"] is True

    # 2. A removed entry: the next one's link points at nothing that is there.
    row = sql(relay, "SELECT * FROM audit_entries WHERE id = :id", id=target["id"])[0]
    sql(relay, "DELETE FROM audit_entries WHERE id = :id", id=target["id"])
    assert verify(relay) == {"ok": False, "entries": len(entries) - 1, "first_bad": after["id"]}
    columns = ", ".join(row._mapping.keys())
    values = ", ".join(f":{k}" for k in row._mapping)
    sql(relay, f"INSERT INTO audit_entries ({columns}) VALUES ({values})", **dict(row._mapping))
    assert verify(relay)["ok"] is True

    # 3. An inserted entry, well formed and hashed right, linked to the entry before it: the entry
    # after it still links to that entry, not to the forgery, and is the first bad one.
    seq = seqs[target["id"]]
    sql(relay, "UPDATE audit_entries SET seq = -seq WHERE seq > :s", s=seq)
    sql(relay, "UPDATE audit_entries SET seq = 1 - seq WHERE seq < 0")
    forged = {**target, "id": "aud_forged", "ref": "tm_forged", "prev_hash": target["hash"]}
    forged["hash"] = recomputed(forged)
    sql(
        relay,
        "INSERT INTO audit_entries (seq, id, at, actor_kind, action, kind, ref, after, ip, user_agent,"
        " request_id, prev_hash, hash) VALUES (:seq, :id, :at, 'admin_token', :action, :kind, :ref,"
        " :after, :ip, :ua, :rid, :prev, :hash)",
        seq=seq + 1,
        id=forged["id"],
        at=datetime.fromisoformat(forged["at"]),
        action=forged["action"],
        kind=forged["kind"],
        ref=forged["ref"],
        after=json.dumps(forged["after"], sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        ip=forged["ip"],
        ua=forged["user_agent"],
        rid=forged["request_id"],
        prev=forged["prev_hash"],
        hash=forged["hash"],
    )
    assert verify(relay) == {"ok": False, "entries": len(entries) + 1, "first_bad": after["id"]}
    sql(relay, "DELETE FROM audit_entries WHERE id = 'aud_forged'")
    sql(relay, "UPDATE audit_entries SET seq = -seq WHERE seq > :s", s=seq + 1)
    sql(relay, "UPDATE audit_entries SET seq = -seq - 1 WHERE seq < 0")
    assert verify(relay)["ok"] is True


def test_concurrent_writers_form_one_chain(relay: RelayProcess) -> None:
    """Catalog writes (which also queue on the catalog revision's row) and failed sign-ins (which
    write nothing but their entry, so only the chain lock orders them), all at once."""
    before = verify(relay)["entries"]
    names = some_changes(relay, 8)

    def write(i: int) -> int:
        """One change; a 503 (SQLite busy past its timeout on a loaded machine: nothing was written)
        is retried as a client would, so every change lands exactly once."""
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        with httpx.Client(base_url=relay.control_url, headers=headers, timeout=60) as c:
            for _ in range(10):
                if i % 2:
                    answer = c.patch(f"/api/teams/{names[i % 8]}", json={"display_name": f"n{i}"})
                else:
                    answer = c.post(
                        "/api/auth/login", json={"email": f"nobody-{i}@example.com", "password": "x"}
                    )
                if answer.status_code != 503:
                    return answer.status_code
                time.sleep(0.2)
            return 503

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(write, range(64)))
    assert sorted(statuses) == [200] * 32 + [401] * 32, Counter(statuses)
    assert verify(relay) == {"ok": True, "entries": before + 8 + 64, "first_bad": None}
    seqs = sorted(r.seq for r in sql(relay, "SELECT seq FROM audit_entries"))
    assert seqs == list(range(1, before + 8 + 64 + 1))


def test_filters_pages_and_refusals(relay: RelayProcess) -> None:
    started = datetime.now(UTC)  # after every earlier entry: they were committed before this
    names = some_changes(relay, 3)
    assert relay.api("DELETE", f"/api/teams/{names[0]}").status_code == 204
    teams = all_entries(relay, kind="Team", **{"from": started.isoformat()})
    assert [(e["action"], e["after" if e["action"] == "create" else "before"]["name"]) for e in teams] == [
        ("delete", names[0]),
        ("create", names[2]),
        ("create", names[1]),
        ("create", names[0]),
    ]
    assert next(e["ref"] for e in all_entries(relay, action="delete", kind="Team")) == teams[0]["ref"]
    assert all(e["actor"]["kind"] == "admin_token" for e in all_entries(relay, actor="admin_token"))
    assert all_entries(relay, actor="nobody@example.com") == []
    assert all_entries(relay, to=(started - timedelta(days=1)).isoformat()) == []

    first = relay.control.get("/api/audit", params={"limit": "2"}).json()
    second = relay.control.get("/api/audit", params={"limit": "2", "cursor": first["next_cursor"]}).json()
    whole = all_entries(relay)
    assert [e["id"] for e in first["items"] + second["items"]] == [e["id"] for e in whole[:4]]

    batch_cursor = "MjAyNi0wMS0wMVQwMDowMDowMCswMDowMHxiYXRjaF8x"  # a batch-list cursor: foreign here
    for params, named in [
        ({"who": "x"}, "who"),
        ({"action": "wipe"}, "action"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-01-01T00:00:00"}, "to"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"cursor": batch_cursor}, "cursor"),
        ({"kind": ""}, "kind"),
    ]:
        response = relay.control.get("/api/audit", params=params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["error"]["message"].find(named) >= 0, response.text
    assert httpx.get(f"{relay.control_url}/api/audit", timeout=10).status_code == 401


def test_relay_audit_export_writes_the_entries_oldest_first(relay: RelayProcess, tmp_path: Path) -> None:
    some_changes(relay, 2)
    env = {"RELAY_CONTROL_URL": relay.control_url, "RELAY_ADMIN_TOKEN": ADMIN_TOKEN, "PATH": "/usr/bin:/bin"}
    out = tmp_path / "audit.jsonl"
    done = subprocess.run(
        [RELAY_BIN, "audit", "export", "-o", str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert exported == list(reversed(all_entries(relay)))
    assert exported[0]["prev_hash"] == "0" * 64
    checked = subprocess.run(
        [RELAY_BIN, "audit", "verify"], env=env, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0 and f"{len(exported)} entries" in checked.stdout, checked.stderr
