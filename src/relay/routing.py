"""(principal, model) → plan (SPEC §4). For now: which models a policy grants (``GET /v1/models``).

A model is listed when it is enabled, has an enabled binding on an enabled host, and a grant of the
policy matches it on that binding's host.
"""

from __future__ import annotations

from relay.catalog import Model, Policy, Snapshot
from relay.domain.grants import grant_matches


def granted_models(policy: Policy, snapshot: Snapshot) -> list[Model]:
    out = []
    for model in snapshot.models.values():
        if not model.enabled:
            continue
        for binding in snapshot.bindings_by_model.get(model.id, ()):
            host = snapshot.hosts.get(binding.host_id)
            if not binding.enabled or host is None or not host.enabled:
                continue
            if any(
                grant_matches(
                    g, model=model.name, aliases=model.aliases, provider=model.provider, host=host.name
                )
                for g in policy.grants
            ):
                out.append(model)
                break
    return sorted(out, key=lambda m: m.name)
