"""The cache step's own rules (SPEC §19), in process over the real stores: which requests bypass, the
scope a key is made in, entries that cannot be read, and a store that refuses or never answers being a
miss — never an error — counted, and then skipped for a moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from relay.adapters import Usage
from relay.domain.cache_policy import CachePolicy
from relay.request.auth import Principal, build_principal
from relay.request.cache.step import CacheStep, Entry, Lookup, cache_control, decode_entry, encode_entry
from relay.snapshot import Policy
from relay.state.response_cache import MemoryResponseCache, RedisResponseCache

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def policy(**cache: object) -> Policy:
    return Policy(
        "pol_1", "p", (), (), "prioritized", (), False, True, cache=CachePolicy.model_validate(cache)
    )


def principal(pol: Policy, *, key: str = "key_1", project: str = "prj_1") -> Principal:
    return build_principal(
        pol,
        key_hash="h" * 64,
        credential_id=key,
        principal_kind="serviceaccount",
        principal_id="sa_1",
        project_id=project,
        team_id="tm_1",
    )


def test_cache_control_directives_are_read_case_and_space_insensitively() -> None:
    assert cache_control({}) == (False, False)
    assert cache_control({"cache-control": "No-Cache"}) == (True, False)
    assert cache_control({"cache-control": "max-age=0, no-store"}) == (False, True)
    assert cache_control({"cache-control": "no-cache,no-store"}) == (True, True)
    assert cache_control({"cache-control": "no-transform"}) == (False, False)


def test_bypass_and_no_cache() -> None:
    step = CacheStep(MemoryResponseCache())
    who = principal(policy(ttl="1h"))
    assert step.lookup_for(who, "openai", BODY, {"cache-control": "no-store"}, stream=False) is None
    lookup = step.lookup_for(who, "openai", BODY, {"cache-control": "no-cache"}, stream=False)
    assert lookup is not None and lookup.read is False and lookup.ttl_s == 3600
    no_streams = principal(policy(ttl="1h", streams=False))
    assert step.lookup_for(no_streams, "openai", BODY, {}, stream=True) is None
    assert step.lookup_for(no_streams, "openai", BODY, {}, stream=False) is not None


def test_the_scope_decides_who_shares_a_key() -> None:
    step = CacheStep(MemoryResponseCache())

    def key(scope: str, **who: str) -> str:
        lookup = step.lookup_for(
            principal(policy(ttl="1h", scope=scope), **who), "openai", BODY, {}, stream=False
        )
        assert lookup is not None and lookup.namespace == "pol_1"
        return lookup.key

    assert key("project", key="a") == key("project", key="b")
    assert key("project", project="prj_1") != key("project", project="prj_2")
    assert key("credential", key="a") != key("credential", key="b")
    assert key("policy", project="prj_1", key="a") == key("policy", project="prj_2", key="b")
    # A caller without a project is scoped to its credential under scope project.
    assert key("project", project="", key="a") != key("project", project="", key="b")


def test_an_entry_round_trips_and_garbage_is_a_miss() -> None:
    entry = Entry(b'{"id": "x"}\n', "application/json", Usage(3, 4, 1, None))
    assert decode_entry(encode_entry(entry)) == entry
    for raw in (b"", b"no newline", b"{}\nbody", b'{"ct": "a", "u": [1]}\nbody', b"\xff\nbody"):
        assert decode_entry(raw) is None


async def test_entries_past_the_entry_bound_are_not_kept() -> None:
    step = CacheStep(MemoryResponseCache(max_entry_bytes=100))
    lookup = Lookup("pol_1", "k", 60, read=True)
    assert await step.put(lookup, Entry(b"x" * 200, "application/json", Usage())) is False
    assert await step.get(lookup) is None
    assert await step.put(lookup, Entry(b"x" * 10, "application/json", Usage())) is True
    assert (await step.get(lookup)) == Entry(b"x" * 10, "application/json", Usage())


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A loopback server that accepts connections and never answers (a frozen Redis)."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.mark.parametrize("kind", ["refused", "frozen"])
async def test_a_store_that_fails_or_times_out_is_a_miss_counted_and_then_skipped(
    kind: str, silent_port: int
) -> None:
    port = 9 if kind == "refused" else silent_port  # 9: nothing listens on loopback's discard port
    store = RedisResponseCache(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    errors: list[str] = []
    step = CacheStep(store, on_error=errors.append)
    lookup = Lookup("pol_1", "k", 60, read=True)
    try:
        assert await step.get(lookup) is None
        assert errors == ["lookup"]
        # Within the cooldown the store is not asked again (no second timeout), still counted.
        assert await step.put(lookup, Entry(b"{}", "application/json", Usage())) is False
        assert errors == ["lookup", "store"]
    finally:
        await store.close()
