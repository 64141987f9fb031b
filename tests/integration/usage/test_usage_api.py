"""The usage API over HTTP (SPEC §8, §9, §11) against real ``relay serve`` processes on SQLite and
Postgres; events and payloads are seeded straight into the server's database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from relay.store import usage as store
from relay.store.engine import create_engine
from relay.store.usage_flush import write_flush
from relay.usage.capture import PayloadRecord
from relay.usage.event import UsageEvent
from tests.fixtures.relay_server import RelayProcess
from tests.integration.usage.helpers import BASE_TS, batch_event, make_event


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def seed(relay: RelayProcess, events: list[UsageEvent], payloads: Sequence[Mapping[str, Any]] = ()) -> None:
    async def run() -> None:
        engine = create_engine(relay.database_url)
        try:
            async with engine.connect() as conn:  # as the live writer writes them
                await write_flush(conn, events, [PayloadRecord(**payload) for payload in payloads])
        finally:
            await engine.dispose()

    asyncio.run(run())


def events(relay: RelayProcess, **params: Any) -> list[str]:
    response = relay.control.get("/api/usage/events", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    assert response.json()["next_cursor"] is None
    return [e["id"] for e in response.json()["events"]]


def error_of(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"]["code"] == "invalid_request"
    return str(body["error"]["message"])


def test_every_filter_and_the_event_shape(relay: RelayProcess) -> None:
    team = relay.create("teams", {"name": uniq("team")})
    policy = relay.create("policies", {"name": uniq("pol")})
    project = relay.create("projects", {"name": uniq("prj"), "team": team["name"]})
    other_project = f"prj_gone{uuid.uuid4().hex[:8]}"  # a deleted project: only its id remains
    mine = {"project_id": project["id"], "team_id": team["id"], "policy_id": policy["id"]}
    ok = make_event(minutes=0, **mine)
    upstream_5xx = make_event(minutes=1, status=502, error_kind="upstream_unavailable", **mine)
    never_reached = make_event(minutes=2, status=0, error_kind="no_keys", model="m-2", host="", **mine)
    client_4xx = make_event(minutes=3, status=429, host="anthropic", principal_id="usr_x", **mine)
    batch_id = f"bat_{uuid.uuid4().hex[:12]}"
    item = batch_event(batch_id, 0, minutes=4, credential_id="jti_x", **mine)
    gone = make_event(minutes=5, project_id=other_project, team_id=team["id"], policy_id=policy["id"])
    seed(relay, [ok, upstream_5xx, never_reached, client_4xx, item, gone])

    by_project = {"project": project["name"]}
    assert events(relay, **by_project) == [item.id, client_4xx.id, never_reached.id, upstream_5xx.id, ok.id]
    assert events(relay, project=project["id"]) == events(relay, **by_project)
    assert events(relay, project=other_project) == [gone.id]
    assert len(events(relay, team=team["name"])) == len(events(relay, policy=policy["id"])) == 6
    assert events(relay, policy=policy["name"]) == events(relay, team=team["id"])
    assert events(relay, source="batch", **by_project) == [item.id]
    assert len(events(relay, source="live", **by_project)) == 4
    assert events(relay, model="m-2", **by_project) == [never_reached.id]
    assert events(relay, host="anthropic", **by_project) == [client_4xx.id]
    assert events(relay, principal_id="usr_x", **by_project) == [client_4xx.id]
    assert events(relay, credential_id="jti_x", **by_project) == [item.id]
    assert events(relay, batch_id=batch_id) == [item.id]
    assert events(relay, status_class="2xx", **by_project) == [item.id, ok.id]
    assert events(relay, status_class="4xx", **by_project) == [client_4xx.id]
    assert events(relay, status_class="5xx", **by_project) == [upstream_5xx.id]
    assert events(relay, status="0", **by_project) == [never_reached.id]
    assert events(relay, error="true", **by_project) == [client_4xx.id, never_reached.id, upstream_5xx.id]
    assert events(relay, error="False", **by_project) == [item.id, ok.id]
    window = {"from": "2026-03-01T12:01:00Z", "to": "2026-03-01T14:03:00+02:00"}  # [12:01, 12:03) UTC
    assert events(relay, **window, **by_project) == [never_reached.id, upstream_5xx.id]

    rendered = relay.control.get("/api/usage/events", params={"batch_id": batch_id}).json()["events"][0]
    assert rendered == {**item.to_row(), "ts": "2026-03-01T12:04:00Z"}
    assert rendered["source"] == "batch" and rendered["batch_idx"] == 0 and rendered["cost_nanos"] == 1000


def test_pages_walk_newest_first_without_gaps_or_duplicates(relay: RelayProcess) -> None:
    project = f"prj_{uuid.uuid4().hex[:12]}"
    seeded = [make_event(minutes=i // 4, project_id=project) for i in range(25)]  # four per timestamp
    seed(relay, seeded)
    expected = [e.id for e in sorted(seeded, key=lambda e: (e.ts, e.id), reverse=True)]
    seen: list[str] = []
    params: dict[str, Any] = {"project": project, "limit": 10}
    pages = 0
    while True:
        body = relay.control.get("/api/usage/events", params=params).json()
        pages += 1
        seen += [e["id"] for e in body["events"]]
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert pages == 3 and seen == expected
    default = relay.control.get("/api/usage/events", params={"project": project}).json()
    assert len(default["events"]) == 25 and default["next_cursor"] is None  # default limit 100
    one = relay.control.get("/api/usage/events", params={"project": project, "limit": 1}).json()
    assert [e["id"] for e in one["events"]] == expected[:1] and one["next_cursor"]
    assert relay.control.get("/api/usage/events", params={"limit": 1000}).status_code == 200


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"projcet": "x"}, "projcet"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"source": "replay"}, "source"),
        ({"status_class": "3xx"}, "status_class"),
        ({"status": "ok"}, "status"),
        ({"error": "maybe"}, "error"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-03-01T00:00:00"}, "to"),  # no offset: ambiguous
        ({"from": "2026-03-02T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "from"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
    ],
)
def test_bad_event_queries_name_the_parameter(
    relay: RelayProcess, params: dict[str, str], named: str
) -> None:
    message = error_of(relay.control.get("/api/usage/events", params=params))
    assert message.startswith(named) or repr(named) in message


def test_repeated_parameters_are_refused(relay: RelayProcess) -> None:
    message = error_of(relay.control.get("/api/usage/events?source=live&source=batch"))
    assert "source" in message


def test_summary_for_every_group(relay: RelayProcess) -> None:
    team = relay.create("teams", {"name": uniq("team")})
    project = f"prj_{uuid.uuid4().hex[:12]}"
    common = {"project_id": project, "team_id": team["id"]}
    seeded = [make_event(minutes=i * 90, latency_ms=10 * (i + 1), **common) for i in range(10)]  # 12:00 +15h
    seeded[0].status, seeded[0].error_kind, seeded[0].cost_nanos = 500, "upstream_error", None
    batch_id = f"bat_{uuid.uuid4().hex[:12]}"
    seeded += [
        batch_event(batch_id, i, model="m-b", host="h-b", policy_id="pol_b", cost_nanos=None, **common)
        for i in range(2)
    ]
    seed(relay, seeded)

    def summary(group_by: str, **params: Any) -> dict[Any, dict[str, Any]]:
        response = relay.control.get(
            "/api/usage/summary", params={"group_by": group_by, "project": project, **params}
        )
        assert response.status_code == 200, response.text
        return {r["group"]: r for r in response.json()["rows"]}

    live = summary("source")["live"]
    assert live == {
        "group": "live",
        "requests": 10,
        "errors": 1,
        "cancelled": 0,
        "input_tokens": 100,
        "output_tokens": 50,
        "cached_input_tokens": 0,
        "cost_nanos": 9000,
        "p50_latency_ms": pytest.approx(55.0),
        "p95_latency_ms": pytest.approx(95.5),
    }
    assert summary("source")["batch"]["cost_nanos"] is None
    assert {k: v["requests"] for k, v in summary("model").items()} == {"gpt-test": 10, "m-b": 2}
    assert {k: v["requests"] for k, v in summary("host").items()} == {"openai": 10, "h-b": 2}
    assert {k: v["requests"] for k, v in summary("policy").items()} == {"pol_a": 10, "pol_b": 2}
    assert summary("policy")["pol_a"]["name"] is None  # ids of objects that do not exist (any more)
    teams = summary("team")
    assert teams[team["id"]]["requests"] == 12 and teams[team["id"]]["name"] == team["name"]
    assert summary("project")[project]["requests"] == 12
    days = summary("day")
    assert list(days) == ["2026-03-01", "2026-03-02"]
    assert (
        days["2026-03-01"]["requests"] == 8 + 2 and days["2026-03-02"]["requests"] == 2
    )  # 12:00…22:30, 00:00, 01:30
    assert summary("source", error="true") == {
        "live": {
            **live,
            "requests": 1,
            "errors": 1,
            "input_tokens": 10,
            "output_tokens": 5,
            "cost_nanos": None,
            "p50_latency_ms": 10.0,
            "p95_latency_ms": 10.0,
        }
    }
    # percentiles=false: the same rows (read from the usage rollup) with null percentiles.
    for group_by in store.GROUPS:
        timed = group_by in ("minute", "hour")  # these need a bounded range; this one ends mid-minute
        extra = {"from": "2026-03-01T00:00:00Z", "to": "2026-03-01T23:59:30Z"} if timed else {}
        with_percentiles = summary(group_by, **extra)
        without = summary(group_by, percentiles="false", **extra)
        assert without == {
            group: {**row, "p50_latency_ms": None, "p95_latency_ms": None}
            for group, row in with_percentiles.items()
        }, group_by
        assert without, group_by


def test_summary_by_credential_names_relay_keys(relay: RelayProcess) -> None:
    """SPEC §8 extension (issue 20): ``group_by=credential`` — which key spent this."""
    team = relay.create("teams", {"name": uniq("team")})
    project = relay.create("projects", {"name": uniq("prj"), "team": team["name"]})
    account = relay.create("service-accounts", {"name": uniq("sa"), "project": project["name"]})
    response = relay.api(
        "POST",
        "/api/keys",
        {"principal_kind": "serviceaccount", "principal": account["name"], "name": uniq("k")},
    )
    assert response.status_code == 201, response.text
    key = response.json()["key"]
    scope = {"project_id": project["id"], "team_id": team["id"]}
    seed(
        relay,
        [make_event(credential_id=key["id"], cost_nanos=700, **scope) for _ in range(3)]
        + [make_event(credential_kind="token", credential_id="jti-abc", cost_nanos=50, **scope)],
    )
    response = relay.control.get(
        "/api/usage/summary", params={"group_by": "credential", "project": project["id"]}
    )
    assert response.status_code == 200, response.text
    rows = {r["group"]: r for r in response.json()["rows"]}
    assert set(rows) == {key["id"], "jti-abc"}
    assert (rows[key["id"]]["requests"], rows[key["id"]]["cost_nanos"], rows[key["id"]]["name"]) == (
        3,
        2100,
        key["name"],
    )
    assert rows["jti-abc"]["cost_nanos"] == 50 and rows["jti-abc"]["name"] is None


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({}, "group_by"),
        ({"group_by": "user"}, "group_by"),
        ({"group_by": "day", "limit": "5"}, "limit"),
        ({"group_by": "day", "percentiles": "no"}, "percentiles"),
    ],
)
def test_bad_summary_queries(relay: RelayProcess, params: dict[str, str], named: str) -> None:
    message = error_of(relay.control.get("/api/usage/summary", params=params))
    assert message.startswith(named) or repr(named) in message


def test_payload_logging_setting(relay: RelayProcess) -> None:
    path = "/api/settings/payload_logging"
    revision = relay.api("GET", "/api/snapshot").json()["revision"]
    assert relay.api("GET", path).json() == {"enabled": False, "max_bytes": 1048576}  # never set yet
    on = relay.api("PUT", path, {"enabled": True, "max_bytes": 2048})
    assert on.status_code == 200 and on.json() == {"enabled": True, "max_bytes": 2048}
    assert relay.api("GET", path).json() == {"enabled": True, "max_bytes": 2048}
    assert relay.api("GET", "/api/snapshot").json()["revision"] > revision  # every replica reloads
    off = relay.api("PUT", path, {"enabled": False})  # the cap is kept when left out
    assert off.json() == relay.api("GET", path).json() == {"enabled": False, "max_bytes": 2048}
    for bad in (
        {"enabled": "yes"},
        {"max_bytes": 4096},
        {"enabled": True, "max_bytes": 1023},
        {"enabled": True, "max_bytes": 64 * 1024 * 1024 + 1},
        {"enabled": True, "max_bytes": 2048.5},
        {"enabled": True, "extra": 1},
        ["enabled"],
    ):
        response = relay.api("PUT", path, bad)
        assert response.status_code == 400, (bad, response.text)
    assert relay.api("GET", path).json() == {"enabled": False, "max_bytes": 2048}
    assert relay.control.put(path, content=b"{not json").status_code == 400
    assert httpx.get(relay.control_url + path).status_code == 401


def test_payloads(relay: RelayProcess) -> None:
    request_id = f"req-{uuid.uuid4().hex}"
    sse = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
    seed(
        relay,
        [],
        [
            {
                "request_id": request_id,
                "ts": BASE_TS,
                "request_body": b'{"model": "gpt-test", "stream": true}',
                "response_body": sse,
                "request_truncated": False,
                "response_truncated": True,
            }
        ],
    )
    response = relay.control.get(f"/api/payloads/{request_id}")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "request_id": request_id,
        "ts": "2026-03-01T12:00:00Z",
        "request": {"model": "gpt-test", "stream": True},
        "response": sse.decode(),
        "request_truncated": False,
        "response_truncated": True,
    }
    missing = relay.control.get("/api/payloads/req-unknown")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_the_usage_api_needs_the_admin_token(relay: RelayProcess) -> None:
    for path in ("/api/usage/events", "/api/usage/summary?group_by=day", "/api/payloads/x"):
        assert httpx.get(relay.control_url + path).status_code == 401
