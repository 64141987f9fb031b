"""Each host key's breaker as the key pool sees it (SPEC §6, §16 "Catalog and health").

Reads the breaker records of every host key in this replica's snapshot from the shared state (one
round trip), and names each key's state the way the pool decides it: ``open`` (skipped until
``open_until``, or until the key is edited for auth failures), ``half-open`` (the backoff is over: the
next request may try it) or ``closed``. A record left from before the key's last edit is closed (an
edit re-arms the breaker). Never the key's value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from relay.snapshot import Snapshot
from relay.state import SharedState
from relay.state.base import StateUnavailable


class HealthService:
    def __init__(self, snapshot: Callable[[], Snapshot], state: SharedState) -> None:
        self._snapshot = snapshot
        self._state = state

    async def host_keys(self) -> dict[str, Any]:
        """``{"shared_state": bool, "items": [{"id", "name", "host", "enabled", "usable", "breaker",
        "reason", "failures", "open_until"}]}``, by host then key name."""
        snap = self._snapshot()
        keys = sorted(
            snap.host_keys.values(),
            key=lambda k: (snap.hosts[k.host_id].name if k.host_id in snap.hosts else "", k.name),
        )
        reachable = True
        try:
            records = await self._state.breakers([k.id for k in keys]) if keys else {}
        except StateUnavailable:
            records, reachable = {}, False
        now = time.time()
        items = []
        for key in keys:
            record = records.get(key.id)
            breaker, reason, failures, until = "closed", None, 0, None
            if record is not None and record.version == key.version:
                reason, failures, until = record.reason, record.failures, record.open_until
                breaker = "open" if until is None or until > now else "half-open"
            host = snap.hosts.get(key.host_id)
            items.append(
                {
                    "id": key.id,
                    "name": key.name,
                    "host": host.name if host else key.host_id,
                    "enabled": key.enabled,
                    "usable": key.value is not None,
                    "breaker": breaker,
                    "reason": reason,
                    "failures": failures,
                    "open_until": until,
                }
            )
        return {"shared_state": reachable, "items": items}
