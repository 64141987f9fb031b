"""The response cache as a request step (SPEC §19): decide, look up, store, purge.

Where it runs. After authentication, the policy, the grants (routing) — and, once §20 lands, the input
guardrails — and before any upstream call, for live requests and batch items alike. A policy without a
``cache`` block never reaches this module: the callers check ``policy.cache is None`` first, the one
attribute read the hot path pays when no policy caches.

What it decides. :meth:`CacheStep.lookup_for` answers None (bypass: ``Cache-Control: no-store``, or a
streamed request under ``streams: false``) or a :class:`Lookup` — the entry's key (``key.cache_key``
over the scope's id, the caller's shape and body) in the policy's namespace, whether to read it
(``no-cache`` skips the read but stores) and its TTL. The scope's id is the caller's project, the
policy, or the credential; a caller with no project under ``scope: project`` is scoped to its
credential, so an entry is never shared wider than the policy says.

Entries. :func:`encode_entry` / :func:`decode_entry`: a one-line JSON header (content type, token
counts) then the whole response in the caller's shape. A hit is answered from that body (as SSE through
``relay.adapters.replay`` when the request streams).

What it deliberately does not know: HTTP, how a hit is sent, the rate limiter, usage events. A store that
fails or times out is a miss (or a store skipped), never an error: counted in
``relay_cache_errors_total`` and logged at most once a minute; after a failure the store is skipped for a
second, so a Redis that does not answer costs one timeout per second, not one per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from relay.adapters import Usage
from relay.request.auth import Principal
from relay.request.cache.key import cache_key
from relay.request.fail_open import FailOpen
from relay.state import StateUnavailable
from relay.state.response_cache import ResponseCache

log = logging.getLogger("relay.cache")

HIT, MISS, BYPASS = "hit", "miss", "bypass"


@dataclass(frozen=True, slots=True)
class Entry:
    """A cached answer: the whole response in the caller's shape and the tokens it used."""

    body: bytes
    content_type: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class Lookup:
    """Where a request's answer is kept (``namespace``: the policy's id) and what to do with it."""

    namespace: str
    key: str
    ttl_s: int
    read: bool  # False under Cache-Control: no-cache (store only)


def encode_entry(entry: Entry) -> bytes:
    usage = entry.usage
    header = {
        "ct": entry.content_type,
        "u": [usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.reasoning_tokens],
    }
    return orjson.dumps(header) + b"\n" + entry.body


def decode_entry(raw: bytes) -> Entry | None:
    """The entry, or None for bytes this version cannot read (then it is a miss, and overwritten)."""
    head, sep, body = raw.partition(b"\n")
    if not sep:
        return None
    try:
        header: Any = orjson.loads(head)
        inp, out, cached, reasoning = header["u"]
        return Entry(body, str(header["ct"]), Usage(int(inp), int(out), int(cached), reasoning))
    except (ValueError, KeyError, TypeError):
        return None


def cache_control(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """``(no_cache, no_store)`` from the request's ``Cache-Control`` directives."""
    value = headers.get("cache-control")
    if not value:
        return False, False
    directives = {part.strip().split("=", 1)[0].lower() for part in value.split(",")}
    return "no-cache" in directives, "no-store" in directives


def scope_id(scope: str, principal: Principal) -> str:
    if scope == "policy":
        return principal.policy.id
    if scope == "project" and principal.project_id:
        return principal.project_id
    return principal.credential_id


class CacheStep:
    """The step over one :class:`ResponseCache`; ``on_result(result)`` counts hit / miss / bypass."""

    def __init__(
        self,
        store: ResponseCache,
        *,
        on_result: Callable[[str], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self._on_result = on_result
        self._guard = FailOpen(
            log, "the response cache is skipped", "answering from upstream", on_fail_open=on_error
        )

    def lookup_for(
        self,
        principal: Principal,
        shape: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        stream: bool,
    ) -> Lookup | None:
        """The request's :class:`Lookup`, or None when it bypasses the cache. ``body`` is the body
        the request is answered for, in the caller's ``shape`` (after any input rewriting)."""
        policy = principal.policy
        block = policy.cache
        assert block is not None, "callers check policy.cache first"
        no_cache, no_store = cache_control(headers)
        if no_store or (stream and not block.streams):
            return None
        key = cache_key(block.scope, scope_id(block.scope, principal), shape, body)
        return Lookup(policy.id, key, block.ttl_s, read=not no_cache)

    def counted(self, result: str) -> None:
        """Count one request's result (the caller knows it once the answer is chosen)."""
        if self._on_result is not None:
            self._on_result(result)

    async def get(self, lookup: Lookup) -> Entry | None:
        """The stored answer, or None (a miss: nothing stored, unreadable, or the store failed)."""
        if not lookup.read:
            return None
        if self._guard.skipping():
            self._guard.failed("lookup", None)
            return None
        try:
            raw = await self.store.get(lookup.namespace, lookup.key)
        except StateUnavailable as exc:
            self._guard.failed("lookup", exc)
            return None
        return decode_entry(raw) if raw is not None else None

    async def put(self, lookup: Lookup, entry: Entry) -> bool:
        """Keep ``entry`` (False: too large, or the store failed — the answer is not affected)."""
        if self._guard.skipping():
            self._guard.failed("store", None)
            return False
        try:
            return await self.store.put(lookup.namespace, lookup.key, encode_entry(entry), lookup.ttl_s)
        except StateUnavailable as exc:
            self._guard.failed("store", exc)
            return False

    async def for_item(
        self, principal: Principal, shape: str, body: Mapping[str, Any]
    ) -> tuple[Lookup | None, Entry | None]:
        """A batch item's lookup (never streamed, no headers) and its cached answer, if any."""
        lookup = self.lookup_for(principal, shape, body, {}, stream=False)
        return lookup, (await self.get(lookup) if lookup is not None else None)

    async def missed(self, lookup: Lookup, body: bytes | None, usage: Usage) -> None:
        """Count a miss and keep its answer (``body``: None when it did not complete)."""
        self.counted(MISS)
        if body is not None:
            await self.put(lookup, Entry(body, "application/json", usage))

    async def purge(self, policy_id: str) -> int:
        """Empty the policy's entries (``DELETE /api/policies/{ref}/cache``); raises
        ``StateUnavailable`` when the store does not answer (the admin is told, not the caller)."""
        return await self.store.purge(policy_id)
