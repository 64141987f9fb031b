"""Why a batch item fails (SPEC §10.4, §10.6, §10.8), over HTTP against real ``relay serve`` processes
and the real fake upstream, on SQLite and on Postgres (with Redis for the hot state, as in production).
Every cause is also tested in-process on ``ItemRunner`` (``tests/unit/batches/test_runner.py``); what
stays here is what needs the processes: items of one batch running side by side, limits not counting
submissions and polls, and catalog changes made through the control API between submit and run.

Every test checks the three places a failure shows: the item's state (``discarded``), its ``error`` in
``GET /v1/batches/{id}/results`` (the full text, not only the §10.4 prefix), and its one usage event
(``error_kind``, ``error_message`` equal to the item's error, ``cost_nanos`` null when nothing was
priced).

One module fixture (``stage``) per backend, two processes on one database and one payload directory:

1. ``front`` runs no items (``RELAY_BATCH_WORKERS=0``). It applies the module catalog and takes the
   submissions whose credential or policy the test then changes through the control API, so no item of
   those batches can run before the change (§10.6: checked when the item runs, not at submit).
2. Once every change is made, ``front`` stops and ``workers`` starts (16 workers,
   ``RELAY_BATCH_ITEM_TIMEOUT_S=1.5``): it runs the staged items and serves every test of the module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    HOST_OPENAI,
    Gateway,
    Reaper,
    backend_setup,
)
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import (
    assert_failed_event,
    chat_item,
    item_events,
    mint_token,
    results,
    submit,
    wait_finished,
)

ITEM_TIMEOUT_S = 1.5  # far above a normal item, even on a busy machine
TIMEOUT_ERROR = f"timeout: item ran longer than RELAY_BATCH_ITEM_TIMEOUT_S ({ITEM_TIMEOUT_S} s)"
STAGED_ITEMS = 2

# Catalog objects made on ``front`` for the staged batches (each database is fresh: fixed names).
POLICY_DELETED = "pol-deleted"
POLICY_DISABLED = "pol-disabled"
POLICY_ORDER = "pol-order"
PROJECT_OFF = "project-off"
SA_OFF = "sa-off"
SA_IN_PROJECT_OFF = "sa-in-project-off"
USER_EXPIRED = "user-expired"
USER_REVOKED = "user-revoked"
USER_ALL_REVOKED = "user-all-revoked"
USER_OFF = "user-off"
USER_IN_PROJECT_OFF = "user-in-project-off"


@dataclass
class Staged:
    """A batch submitted on ``front`` before a catalog change; ``restore`` are the control-API PATCHes
    that make its submitter usable again (after its items ran), ``reader_user`` the user whose fresh
    token reads it when the submitting token is gone for good."""

    batch_id: str
    credential: str
    policy_id: str
    restore: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reader_user: str | None = None
    reader_project: str | None = None


@dataclass
class Stage:
    gw: Gateway  # the ``workers`` process, with the module catalog's names and relay key
    batches: dict[str, Staged]


def _key(gw: Gateway, account: str, policy: str | None = None) -> tuple[str, str]:
    body: dict[str, Any] = {"principal_kind": "serviceaccount", "principal": account}
    if policy is not None:
        body["policy"] = policy
    created = gw.control_write("POST", "/api/keys", body, 201).json()
    return created["key"]["id"], created["plaintext"]


def _user(name: str, project: str) -> dict[str, Any]:
    spec = {"email": f"{name}@example.com", "memberships": [{"project": project}]}
    return {"kind": "User", "name": name, "spec": spec}


def _stage(gw: Gateway) -> dict[str, Staged]:
    """Submit one batch per credential/policy case on ``front``, then break its credential or policy."""
    pool = [f"{HOST_OPENAI}-k1"]
    docs: list[dict[str, Any]] = [
        *(
            {"kind": "Policy", "name": name, "spec": {"models": ["*"], "host_keys": pool}}
            for name in (POLICY_DELETED, POLICY_DISABLED, POLICY_ORDER)
        ),
        {"kind": "Project", "name": PROJECT_OFF, "spec": {"team": "live-team", "default_policy": gw.policy}},
        {"kind": "ServiceAccount", "name": SA_OFF, "spec": {"project": gw.project}},
        {"kind": "ServiceAccount", "name": SA_IN_PROJECT_OFF, "spec": {"project": PROJECT_OFF}},
        *(_user(name, gw.project) for name in (USER_EXPIRED, USER_REVOKED, USER_ALL_REVOKED, USER_OFF)),
        _user(USER_IN_PROJECT_OFF, PROJECT_OFF),
    ]
    gw.control_write("POST", "/api/apply", {"documents": docs}, 200)
    main_policy = gw.object_id("policies", gw.policy)
    requests = [chat_item(i) for i in range(STAGED_ITEMS)]
    staged: dict[str, Staged] = {}

    # First the token that must expire before the items run: 2 s to live, minted again if the machine
    # was so slow that it expired before the submission.
    for ttl in (2, 4, 8):
        token = mint_token(gw, USER_EXPIRED, gw.project, ttl_seconds=ttl)["token"]
        response = gw.post("/v1/batches", {"shape": "openai", "requests": requests}, key=token)
        if response.status_code == 202:
            break
        assert response.status_code == 401, response.text
    else:
        raise AssertionError("could not submit with a short-lived token")
    staged["token expired"] = Staged(
        response.json()["id"], token, main_policy, reader_user=USER_EXPIRED, reader_project=gw.project
    )

    revoked = mint_token(gw, USER_REVOKED, gw.project)
    staged["token revoked"] = Staged(
        submit(gw, "openai", requests, key=revoked["token"]),
        revoked["token"],
        main_policy,
        reader_user=USER_REVOKED,
        reader_project=gw.project,
    )
    all_revoked = mint_token(gw, USER_ALL_REVOKED, gw.project)["token"]
    staged["all tokens revoked"] = Staged(
        submit(gw, "openai", requests, key=all_revoked),
        all_revoked,
        main_policy,
        reader_user=USER_ALL_REVOKED,
        reader_project=gw.project,
    )
    user_off = mint_token(gw, USER_OFF, gw.project)["token"]
    staged["user disabled (token)"] = Staged(
        submit(gw, "openai", requests, key=user_off),
        user_off,
        main_policy,
        restore=[(f"/api/users/{USER_OFF}", {"enabled": True})],  # old tokens stay revoked
        reader_user=USER_OFF,
        reader_project=gw.project,
    )
    user_key = gw.control_write(
        "POST", "/api/keys", {"principal_kind": "user", "principal": USER_OFF, "project": gw.project}, 201
    ).json()["plaintext"]
    staged["user disabled (key)"] = Staged(
        submit(gw, "openai", requests, key=user_key),
        user_key,
        main_policy,
        restore=[(f"/api/users/{USER_OFF}", {"enabled": True})],
    )
    in_off = mint_token(gw, USER_IN_PROJECT_OFF, PROJECT_OFF)["token"]
    staged["project disabled (token)"] = Staged(
        submit(gw, "openai", requests, key=in_off),
        in_off,
        main_policy,
        restore=[(f"/api/projects/{PROJECT_OFF}", {"enabled": True})],
    )
    _, sa_key = _key(gw, SA_IN_PROJECT_OFF)
    staged["project disabled (key)"] = Staged(
        submit(gw, "openai", requests, key=sa_key),
        sa_key,
        main_policy,
        restore=[(f"/api/projects/{PROJECT_OFF}", {"enabled": True})],
    )
    _, off_key = _key(gw, SA_OFF)
    staged["service account disabled"] = Staged(
        submit(gw, "openai", requests, key=off_key),
        off_key,
        main_policy,
        restore=[(f"/api/service-accounts/{SA_OFF}", {"enabled": True})],
    )
    deleted_id, deleted_key = _key(gw, gw.account, POLICY_DELETED)
    staged["policy deleted"] = Staged(
        submit(gw, "openai", requests, key=deleted_key),
        deleted_key,
        gw.object_id("policies", POLICY_DELETED),
    )
    _, disabled_key = _key(gw, gw.account, POLICY_DISABLED)
    staged["policy disabled"] = Staged(
        submit(gw, "openai", requests, key=disabled_key),
        disabled_key,
        gw.object_id("policies", POLICY_DISABLED),
        restore=[(f"/api/policies/{POLICY_DISABLED}", {"enabled": True})],
    )
    order_id, order_key = _key(gw, gw.account, POLICY_ORDER)
    staged["credential before policy"] = Staged(
        submit(gw, "openai", requests, key=order_key),
        order_key,
        gw.object_id("policies", POLICY_ORDER),
        restore=[
            (f"/api/keys/{order_id}", {"enabled": True}),
            (f"/api/policies/{POLICY_ORDER}", {"enabled": True}),
        ],
    )

    # The changes, all after every submission.
    gw.control_write("DELETE", f"/api/tokens/{revoked['jti']}", None, 200)
    gw.control_write("POST", f"/api/users/{USER_ALL_REVOKED}/revoke-tokens", None, 200)
    gw.control_write("PATCH", f"/api/users/{USER_OFF}", {"enabled": False}, 200)
    gw.control_write("PATCH", f"/api/projects/{PROJECT_OFF}", {"enabled": False}, 200)
    gw.control_write("PATCH", f"/api/service-accounts/{SA_OFF}", {"enabled": False}, 200)
    gw.control_write("PATCH", f"/api/keys/{deleted_id}", {"policy": None}, 200)  # else the delete is a 409
    gw.control_write("DELETE", f"/api/policies/{POLICY_DELETED}", None, 204)
    gw.control_write("PATCH", f"/api/policies/{POLICY_DISABLED}", {"enabled": False}, 200)
    gw.control_write("PATCH", f"/api/keys/{order_id}", {"enabled": False}, 200)
    gw.control_write("PATCH", f"/api/policies/{POLICY_ORDER}", {"enabled": False}, 200)

    # The workers must not start before the short-lived token has expired.
    expired = staged["token expired"]
    deadline = time.monotonic() + 15
    while (
        gw.client.get(f"/v1/batches/{expired.batch_id}", headers=gw.auth(expired.credential)).status_code
        != 401
    ):
        assert time.monotonic() < deadline, "the short-lived token never expired"
        time.sleep(0.1)
    return staged


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stage(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Stage]:
    backend = request.param
    workdir: Path = tmp_path_factory.mktemp(f"batch-failures-{backend}")
    database_url, redis_url, env = backend_setup(backend, workdir)
    env["RELAY_BATCH_PAYLOAD_DIR"] = str(workdir / "payloads")
    front = RelayProcess(workdir / "front", database_url, {**env, "RELAY_BATCH_WORKERS": "0"})
    workers = RelayProcess(
        workdir / "workers", database_url, {**env, "RELAY_BATCH_ITEM_TIMEOUT_S": str(ITEM_TIMEOUT_S)}
    )
    processes = [front, workers]
    try:
        front.start()
        first = Gateway(front, fake_upstream, backend, redis_url)
        first.apply_catalog()
        staged = _stage(first)
        live_reaper.stop([front])  # it never ran an item; its shutdown overlaps the next start
        processes.remove(front)
        workers.start()
        gw = first.sharing(workers)
        for case in staged.values():  # every staged item is final before any test restores anything
            item_events(gw, case.batch_id, STAGED_ITEMS)
        yield Stage(gw, staged)
    finally:
        live_reaper.stop(processes, database_url if backend == "postgres" else None)


# ---------------------------------------------------------------------------------------- timeout


def test_timeout_fails_the_slow_item_only(stage: Stage) -> None:
    """§10.4 ``timeout: ``: an item running longer than RELAY_BATCH_ITEM_TIMEOUT_S is discarded; the
    other items of the batch complete."""
    gw = stage.gw
    batch_id = submit(gw, "openai", [chat_item(0), chat_item(1, fake={"latency_ms": 5000}), chat_item(2)])
    view = wait_finished(gw, batch_id)
    assert view["items"] == [
        {"idx": 0, "state": "completed"},
        {"idx": 1, "state": "discarded"},
        {"idx": 2, "state": "completed"},
    ]
    got = results(gw, batch_id)
    assert got[1] == {"idx": 1, "state": "discarded", "error": TIMEOUT_ERROR}
    assert got[0]["response"]["choices"] and got[2]["response"]["choices"]
    events = item_events(gw, batch_id, 3)
    assert_failed_event(events[1], TIMEOUT_ERROR, "timeout")
    assert events[1]["attempts"] == 1  # the attempt the timeout cut short is counted
    assert events[0]["error_kind"] is None and events[0]["cost_nanos"] > 0
    assert events[2]["error_kind"] is None and events[2]["cost_nanos"] > 0


# ---------------------------------------------------------------------------------------- rate limit


def test_rate_limit_spent_discards_at_once(stage: Stage) -> None:
    """§10.4 ``rate limit exceeded: ``: with a limit of 3 requests in a window that will not end during
    the test, exactly 3 of 8 items complete and the other 5 are discarded instead of waiting for a
    refill. Submitting and polling did not count against the limit (§10.1)."""
    gw = stage.gw
    s = gw.scenario(rules=[{"meter": "requests", "limit": 3, "window": "9999999s"}])
    n = 8
    batch_id = submit(gw, "openai", [chat_item(i, model=s.model) for i in range(n)], key=s.key)
    view = wait_finished(gw, batch_id, key=s.key)
    assert view["counts"] == {"completed": 3, "discarded": 5}
    error = f'rate limit exceeded: policy "{s.policy}" allows 3 requests per 9999999s'
    got = results(gw, batch_id, key=s.key)
    events = item_events(gw, batch_id, n)
    for r in got:
        event = events[r["idx"]]
        if r["state"] == "completed":
            assert r["response"]["choices"], r
            assert event["error_kind"] is None and event["cost_nanos"] > 0
        else:
            assert r == {"idx": r["idx"], "state": "discarded", "error": error}
            assert_failed_event(event, error, "rate_limit_exceeded")
    assert gw.fake.stats()["by_key"][s.value(0)] == 3


# ---------------------------------------------------------------------------------------- key pool


# ---------------------------------------------------------------------------------------- shapes


# ---------------------------------------------------------------------------------------- credential, policy

STAGED_ERRORS = [
    ("token expired", "credential no longer valid: token expired", "credential_invalid"),
    ("token revoked", "credential no longer valid: token revoked", "credential_invalid"),
    ("all tokens revoked", "credential no longer valid: token revoked", "credential_invalid"),
    ("user disabled (token)", "credential no longer valid: token revoked", "credential_invalid"),
    ("user disabled (key)", "credential no longer valid: api key disabled", "credential_invalid"),
    ("project disabled (token)", "credential no longer valid: project unavailable", "credential_invalid"),
    ("project disabled (key)", "credential no longer valid: api key disabled", "credential_invalid"),
    ("service account disabled", "credential no longer valid: api key disabled", "credential_invalid"),
    ("policy deleted", f'policy unavailable: policy "{POLICY_DELETED}" was deleted', "policy_unavailable"),
    ("policy disabled", f'policy unavailable: policy "{POLICY_DISABLED}" is disabled', "policy_unavailable"),
    # The key was disabled AND its policy: the credential is checked first (§10.6).
    ("credential before policy", "credential no longer valid: api key disabled", "credential_invalid"),
]


@pytest.mark.parametrize(("case", "error", "kind"), STAGED_ERRORS, ids=[c[0] for c in STAGED_ERRORS])
def test_credential_and_policy_are_checked_when_the_item_runs(
    stage: Stage, case: str, error: str, kind: str
) -> None:
    """§10.4 ``credential no longer valid: `` + the §3 reason and ``policy unavailable: ``, for a change
    made after the submission: the items run on the current catalog, credential first, then policy.
    The events are read first (the submitter cannot read its batch any more); once the credential is
    usable again (or with a fresh token of the same user), the results show the same error."""
    gw, staged = stage.gw, stage.batches[case]
    events = item_events(gw, staged.batch_id, STAGED_ITEMS)
    for event in events.values():
        assert_failed_event(event, error, kind)
        assert event["policy_id"] == staged.policy_id  # the batch's recorded policy, even when deleted
    for path, body in staged.restore:
        gw.control_write("PATCH", path, body, 200)
    reader = staged.credential
    if staged.reader_user is not None:
        reader = mint_token(gw, staged.reader_user, staged.reader_project or gw.project)["token"]
    got = results(gw, staged.batch_id, key=reader)
    assert got == [{"idx": i, "state": "discarded", "error": error} for i in range(STAGED_ITEMS)]
