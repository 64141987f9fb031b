"""Fixtures for the in-process core suite: a hand-built catalog and a pipeline on in-memory state.

``catalog`` is a fresh :class:`CatalogBuilder` per test holding the usual objects — a team, a project,
a service account, one host with two working keys, a chat model with an alias bound there, a policy
granting ``*`` over both keys and a relay key of the account. Tests add or change records and call
``catalog.snapshot()``. ``wired`` is the same catalog with its host on the session's real fake upstream
(loopback HTTP, no mock), for tests that send requests.

``core`` runs requests through the real :class:`relay.request.pipeline.Pipeline` (the real ``Upstream``,
``RateLimiter`` and ``KeyPool`` over one ``MemoryState``), so breakers and limits are the test's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from relay.request.auth import authenticate
from relay.request.keypool import KeyPool
from relay.request.pipeline import Call, Outcome, Pipeline
from relay.request.ratelimit import RateLimiter
from relay.request.routing import resolve
from relay.snapshot import Snapshot
from relay.state import MemoryState
from relay.upstream import Upstream
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.snapshots import CatalogBuilder

CHAT_MODEL = "core-chat"
CHAT_ALIAS = "core-chat-alias"
CHAT_UPSTREAM = "gpt-core-upstream"


@dataclass
class CoreCatalog:
    """The builder plus the records every core test starts from."""

    build: CatalogBuilder
    records: dict[str, Any]
    key: str  # plaintext of the account's relay key

    def __getattr__(self, name: str) -> Any:
        try:
            return self.records[name]
        except KeyError:
            raise AttributeError(name) from None

    def snapshot(self) -> Snapshot:
        return self.build.snapshot()


def base_catalog(base_url: str) -> CoreCatalog:
    build = CatalogBuilder()
    host = build.host("core-openai", base_url)
    k1 = build.host_key("core-k1", host, "ok-core-k1")
    k2 = build.host_key("core-k2", host, "ok-core-k2")
    model = build.model(CHAT_MODEL, aliases=(CHAT_ALIAS,))
    binding = build.bind(model, host, upstream_name=CHAT_UPSTREAM)
    policy = build.policy("core-main", keys=(k1, k2))
    team = build.team()
    project = build.project(team=team, default_policy=policy)
    account = build.service_account("core-sa", project=project)
    relay_key, plaintext = build.key("core", account=account)
    records = {
        "host": host,
        "k1": k1,
        "k2": k2,
        "model": model,
        "binding": binding,
        "policy": policy,
        "team": team,
        "project": project,
        "account": account,
        "relay_key": relay_key,
    }
    return CoreCatalog(build, records, plaintext)


#: Where hosts of catalogs that never send a request point (nothing listens on the discard port).
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def catalog() -> CoreCatalog:
    """The base catalog, its host pointing nowhere: for auth and routing, which send nothing."""
    return base_catalog(NOWHERE)


@pytest.fixture
def wired(fake: FakeUpstream) -> CoreCatalog:
    """The base catalog with its host on the session's fake upstream (reset for this test)."""
    return base_catalog(fake.base_url)


class Core:
    """One process's request core: ``run`` authenticates, routes and runs a request end to end."""

    def __init__(self, upstream: Upstream) -> None:
        self.state = MemoryState()
        self.limiter = RateLimiter(self.state)
        self.pool = KeyPool(self.state)
        self.pipeline = Pipeline(upstream, self.limiter, self.pool)

    def call(
        self, snapshot: Snapshot, key: str, model: str = CHAT_MODEL, *, stream: bool = False, **body: Any
    ) -> Call:
        principal = authenticate(key, snapshot)
        plan = resolve(principal.policy, model, snapshot)
        request = {"model": model, "messages": [{"role": "user", "content": "hello there"}], **body}
        if stream:
            request["stream"] = True
        return Call(principal, plan, plan.binding.adapter, request, {}, stream)

    async def run(self, snapshot: Snapshot, key: str, model: str = CHAT_MODEL, **body: Any) -> Outcome:
        return await self.pipeline.run(self.call(snapshot, key, model, **body))


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    upstream = Upstream(timeout_s=10.0)
    await upstream.start()
    try:
        yield Core(upstream)
    finally:
        await upstream.close()
