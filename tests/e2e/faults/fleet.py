"""The machinery of the batch fault tests (``test_faults_*``): a fleet of real ``relay serve`` replicas
on one database, a catalog whose upstream key tells which replica sent a request, items with markers
and latencies, the fake upstream's view of who sent what when, and :func:`settle`, the invariant every
fault test ends with.

How "never run twice concurrently" is judged:

* each item's request carries a distinct marker (``"<tag> <idx>"``) and a per-request latency
  (``"fake": {"latency_ms": L}``), and the fake logs when each request ARRIVED;
* each replica's upstream key is a ``value_from_env`` host key with a per-replica value, so the
  fake's ``key`` says WHICH replica sent a request;
* a request that is not abandoned takes at least L, and an item is only sent again after its previous
  attempt ended, so two arrivals of one marker closer than L (less a small tolerance for timer
  granularity) mean two concurrent runs.

What it deliberately does not know: which fault a test injects. The ``fleet_for`` fixture is defined
here and registered for every test by the root conftest.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import PRICING, Gateway, uniq
from tests.fixtures.polling import wait_for
from tests.fixtures.relay_server import RelayProcess
from tests.fixtures.relay_spawn import spawn_serve
from tests.integration.batch_api.helpers import batch_events, results

FINAL = {"completed", "discarded", "cancelled"}
HOST_KEY_ENV = "RELAY_TEST_FAULT_HOST_KEY"  # RELAY_TEST_* is not taken for a mistyped setting
HEARTBEAT_S = 0.5  # dead after 1.5 s of silence, rescue every 1 s
ITEM_TIMEOUT_S = 10
RESCUE_AFTER_S = 12  # bounds how long a wrongly stuck ``running`` item can hang a test
OVERLAP_TOLERANCE = 0.9  # two arrivals of one item closer than 0.9 × latency overlapped


# ---------------------------------------------------------------------------------------------- fleet


@dataclass
class Replica:
    name: str
    process: RelayProcess
    instance: str  # RELAY_INSTANCE_ID (named in ``worker lost: replica <id> …``)
    upstream_key: str  # the value its host key reads from the environment: the fake's ``key``

    @property
    def alive(self) -> bool:
        return self.process.proc is not None and self.process.proc.poll() is None


@dataclass
class Fleet:
    """``relay serve`` replicas on one database and one payload directory, each with its own value of
    the shared ``value_from_env`` host key; closed (SIGTERM, then SIGKILL) at the end of the test."""

    tmp: Path
    database_url: str
    fake: FakeUpstream
    env: dict[str, str] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)
    booting: list[Replica] = field(default_factory=list)

    def launch(self, name: str, **env: str) -> Replica:
        """Spawn a replica without waiting for it (:meth:`ready` waits), e.g. while the catalog is
        applied through another. Launch onto a migrated database: two replicas migrating one fresh
        SQLite file at once can fail with "database is locked"."""
        instance = f"fault-{name}-{uuid.uuid4().hex[:8]}"
        upstream_key = f"{instance}-hk"
        merged = {
            "RELAY_BATCH_PAYLOAD_DIR": str(self.tmp / "payloads"),  # shared by every replica (§10.7)
            "RELAY_BATCH_HEARTBEAT_S": str(HEARTBEAT_S),
            "RELAY_BATCH_ITEM_TIMEOUT_S": str(ITEM_TIMEOUT_S),
            "RELAY_BATCH_RESCUE_AFTER_S": str(RESCUE_AFTER_S),
            "RELAY_BATCH_WORKERS": "4",
            "RELAY_INSTANCE_ID": instance,
            HOST_KEY_ENV: upstream_key,
            **self.env,
            **env,
        }
        process = RelayProcess(self.tmp / name, self.database_url, merged)
        process.workdir.mkdir(parents=True, exist_ok=True)
        process.proc = spawn_serve(process.workdir, process.env, process.log_path)
        replica = Replica(name, process, instance, upstream_key)
        self.replicas.append(replica)
        self.booting.append(replica)
        return replica

    def ready(self, timeout: float = 60.0) -> None:
        """Wait until the replicas launched since the last call answer on both planes (as
        ``RelayProcess.start`` does)."""
        deadline = time.monotonic() + timeout
        booting, self.booting = self.booting, []
        for replica in booting:
            process = replica.process
            while True:
                assert process.proc is not None
                if process.proc.poll() is not None:
                    raise RuntimeError(
                        f"{replica.name} exited with {process.proc.returncode}:\n{process.logs()}"
                    )
                try:
                    if (
                        process.inference.get("/livez").status_code == 200
                        and process.control.get("/api/snapshot").status_code == 200
                    ):
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{replica.name} did not become ready:\n{process.logs()}")
                time.sleep(0.05)

    def start(self, name: str, **env: str) -> Replica:
        replica = self.launch(name, **env)
        self.ready()
        return replica

    def learn(self, key: str) -> None:
        """Wait until every running replica's catalog knows ``key`` (made through another replica; the
        items it submits run on whichever replica claims them)."""
        for replica in self.replicas:
            if replica.alive:
                self.gateway(replica, key).wait_until_known(key, timeout=15)

    def gateway(self, replica: Replica, key: str) -> Gateway:
        gw = Gateway(replica.process, self.fake, "fault", None)
        gw.key = key
        return gw

    def close(self) -> None:
        for replica in self.replicas:
            if replica.alive:
                assert replica.process.proc is not None
                replica.process.proc.send_signal(signal.SIGTERM)
        for replica in self.replicas:
            replica.process.close()

    def logs(self) -> str:
        """Every replica's warnings and errors, one line each (for assertion messages)."""
        out = []
        for replica in self.replicas:
            lines = []
            for line in replica.process.logs().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    lines.append(line)
                    continue
                if not isinstance(record, dict) or record.get("level") not in ("warning", "error"):
                    continue
                exc = str(record.get("exc") or "").strip().splitlines()
                lines.append(
                    f"{record.get('ts')} {record.get('level')} {record.get('message')}"
                    + (f" [{exc[-1]}]" if exc else "")
                )
            out.append(f"--- {replica.name} ({replica.instance}) ---\n" + "\n".join(lines[-25:]))
        return "\n".join(out)


@pytest.fixture
def fleet_for(tmp_path: Path, fake: FakeUpstream) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(database_url: str, **env: str) -> Fleet:
        fleet = Fleet(tmp_path, database_url, fake, dict(env))
        made.append(fleet)
        return fleet

    try:
        yield make
    finally:
        for fleet in made:
            fleet.close()
        fake.reset()  # runtime key rules must not outlive the test (the fake is session-wide)


@dataclass
class Catalog:
    model: str
    key: str  # relay key plaintext
    host_key_ids: list[str]


def apply_catalog(gw: Gateway, host_keys: list[dict[str, str]] | None = None) -> Catalog:
    """The module catalog (team, project, service account) plus a host whose pool is ``host_keys``
    (``{"value": …}`` or ``{"value_from_env": …}``; default: one key read from :data:`HOST_KEY_ENV`),
    a model bound there, a policy over exactly those keys (prioritized) and a relay key governed by it."""
    gw.apply_catalog()
    host, model, policy = uniq("fh"), uniq("fm"), uniq("fp")
    keys = host_keys if host_keys is not None else [{"value_from_env": HOST_KEY_ENV}]
    names = [uniq("fk") for _ in keys]
    docs: list[dict[str, Any]] = [
        {"kind": "Host", "name": host, "spec": {"base_url": gw.fake.base_url}},
        *(
            {"kind": "HostKey", "name": name, "spec": {"host": host, **spec}}
            for name, spec in zip(names, keys, strict=True)
        ),
        {"kind": "Model", "name": model, "spec": {"provider": "openai"}},
        {
            "kind": "Binding",
            "name": uniq("fb"),
            "spec": {"model": model, "host": host, "adapter": "openai", "pricing": PRICING},
        },
        {
            "kind": "Policy",
            "name": policy,
            "spec": {"models": ["*"], "host_keys": names, "key_selection": "prioritized"},
        },
    ]
    gw.control_write("POST", "/api/apply", {"documents": docs}, 200)
    _, key = gw.mint_key(policy)
    return Catalog(model, key, [gw.object_id("host-keys", name) for name in names])


# ---------------------------------------------------------------------------------------------- items


def items(tag: str, n: int, model: str, latency_ms: int) -> list[dict[str, Any]]:
    return [
        {
            "model": model,
            "messages": [{"role": "user", "content": f"{tag} {i}"}],
            "fake": {"latency_ms": latency_ms},
        }
        for i in range(n)
    ]


@dataclass(frozen=True)
class Send:
    key: str
    ts: float  # when the fake received it (its clock: time.time() on this machine)
    status: int | None  # None while the fake still sleeps the latency (or a dropped connection)


def sends(fake: FakeUpstream, tag: str) -> dict[int, list[Send]]:
    """What the fake received for this batch, by item idx, in arrival order."""
    out: dict[int, list[Send]] = defaultdict(list)
    for request in fake.requests(limit=500):
        body = request["body"]
        if not isinstance(body, dict) or not body.get("messages"):
            continue
        content = body["messages"][0].get("content")
        if isinstance(content, str) and content.startswith(tag + " "):
            out[int(content.split()[1])].append(Send(request["key"], request["ts"], request["status"]))
    for attempts in out.values():
        attempts.sort(key=lambda s: s.ts)
    return dict(out)


def assert_never_concurrent(by_idx: dict[int, list[Send]], latency_s: float) -> None:
    """No two requests of one item overlapped: for attempts that each ran their full latency (nobody
    abandoned them), the next one can only arrive after the previous one was answered."""
    for idx, attempts in by_idx.items():
        for first, second in itertools.pairwise(attempts):
            gap = second.ts - first.ts
            assert gap >= OVERLAP_TOLERANCE * latency_s, (
                f"item {idx} was sent twice {gap:.3f} s apart (latency {latency_s} s): by {first.key} "
                f"and {second.key}, concurrently"
            )


# ---------------------------------------------------------------------------------------------- waits


def view(gw: Gateway, batch_id: str) -> dict[str, Any] | None:
    """The batch view, or None when the replica cannot answer right now (its database restarting)."""
    try:
        response = gw.client.get(f"/v1/batches/{batch_id}", headers=gw.auth(None))
    except httpx.TransportError:
        return None
    return dict(response.json()) if response.status_code == 200 else None


def states(v: dict[str, Any]) -> dict[int, str]:
    return {item["idx"]: item["state"] for item in v["items"]}


def in_flight(fake: FakeUpstream, tag: str, replica: Replica) -> set[int]:
    """Items whose request from ``replica`` the fake has received and not yet answered."""
    return {
        idx
        for idx, attempts in sends(fake, tag).items()
        if any(s.key == replica.upstream_key and s.status is None for s in attempts)
    }


@dataclass
class Settled:
    states: dict[int, str]
    errors: dict[int, str | None]
    events: dict[int, dict[str, Any]]

    def having(self, state: str) -> set[int]:
        return {idx for idx, s in self.states.items() if s == state}


def settle(gw: Gateway, batch_id: str, tag: str, n: int, fleet: Fleet, timeout: float = 60.0) -> Settled:
    """Wait until the batch is finished, then check the invariant every fault test ends with: every
    item final, exactly one usage event per item, and states, results and events in agreement (a
    completed item's response answers that item's own request, whichever replica ran it)."""
    last: dict[str, Any] = {}

    def finished() -> bool:
        got = view(gw, batch_id)
        if got is not None:
            last.update(got)
        return got is not None and got["CompletedAt"] is not None

    wait_for(
        f"batch {batch_id} to finish",
        finished,
        timeout,
        lambda: f"counts {last.get('counts')}; items {last.get('items')}\n{fleet.logs()}",
    )
    final = states(last)
    assert sorted(final) == list(range(n)), final
    assert set(final.values()) <= FINAL, f"items not final: {last['counts']}"
    listed = {r["idx"]: r for r in results(gw, batch_id)}
    events = batch_events(gw, batch_id)
    by_idx = {e["batch_idx"]: e for e in events}
    assert len(events) == n and sorted(by_idx) == list(range(n)), (
        f"expected exactly one usage event per item, got {len(events)} for {n} items: "
        f"idxs {sorted(e['batch_idx'] for e in events)}"
    )
    for idx, state in final.items():
        event, result = by_idx[idx], listed[idx]
        assert result["state"] == state, (idx, result, state)
        assert event["source"] == "batch" and event["batch_id"] == batch_id, event
        if state == "completed":
            assert "error" not in result, result
            assert result["response"]["choices"][0]["message"]["content"] == f"Echo: {tag} {idx}", result
            assert event["error_kind"] is None and event["status"] == 200, event
        else:
            assert "response" not in result and result["error"] == event["error_message"], (result, event)
            assert event["cost_nanos"] is None, event
    return Settled(final, {i: r.get("error") for i, r in listed.items()}, by_idx)
