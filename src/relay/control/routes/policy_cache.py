"""``DELETE /api/policies/{ref}/cache`` (SPEC §19): empty a policy's response cache.

Thin: finds the policy in this replica's snapshot (by name or id, as the spend route does) and asks the
cache step to purge its namespace — in Redis every replica's entries, in memory this process's. A store
that does not answer is a 503 (the admin is told; callers never are). Answers ``{"policy", "purged"}``
with the number of entries removed. A purge that happened is recorded in the audit log (SPEC §21:
``purge``, kind ``Policy``); the cache is not in the database, so the entry follows the purge in a
transaction of its own, and a purge that failed records nothing.
"""

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from relay.control.audit.log import AuditLog
from relay.control.routes.table import Route, mount
from relay.control.services.spend import find_policy
from relay.request.cache.step import CacheStep
from relay.snapshot import Snapshot


class PolicyCacheRoutes:
    def __init__(self, cache: CacheStep, snapshot: Callable[[], Snapshot], audit: AuditLog) -> None:
        self._cache = cache
        self._snapshot = snapshot
        self._audit = audit

    async def purge(self, ref: str) -> dict[str, Any]:
        """Remove every cached answer of the policy; its next requests are misses."""
        policy = find_policy(self._snapshot(), ref)
        answer = {"policy": policy.name, "purged": await self._cache.purge(policy.id)}
        await self._audit.record_alone("purge", "Policy", policy.id, after=answer)
        return answer

    def table(self) -> list[Route]:
        return [Route("DELETE", "/api/policies/{ref}/cache", self.purge, "Policy")]


def mount_policy_cache_routes(
    app: FastAPI, cache: CacheStep, snapshot: Callable[[], Snapshot], audit: AuditLog, require_admin: Any
) -> None:
    mount(app, PolicyCacheRoutes(cache, snapshot, audit).table(), require_admin)
