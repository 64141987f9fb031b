"""``GET /api/policies/{ref}/spend`` (SPEC §5): what each budget rule's current window has spent.

Thin: the reader (``services.spend``) finds the policy and reads its counters; this renders them under
``rules``. What it deliberately does not know: snapshots, counters, the shared state.
"""

from typing import Any

from fastapi import FastAPI

from relay.control.routes.table import Route, mount
from relay.control.services.spend import SpendReader


class SpendRoutes:
    def __init__(self, read: SpendReader) -> None:
        self._read = read

    async def policy_spend(self, ref: str) -> dict[str, Any]:
        """Each ``cost_usd`` rule of the policy: its limit and, per counted key (the policy, or each
        credential / project / team that spent in the current window), spent and remaining USD and
        when the window resets. A shared state that does not answer is a 503."""
        return {"rules": await self._read(ref)}

    def table(self) -> list[Route]:
        return [Route("GET", "/api/policies/{ref}/spend", self.policy_spend, "Policy")]


def mount_spend_routes(app: FastAPI, read: SpendReader, require_admin: Any) -> None:
    mount(app, SpendRoutes(read).table(), require_admin)
