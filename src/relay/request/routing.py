"""(policy, model) → plan (SPEC §4), and which models a policy grants (``GET /v1/models``).

Pure functions over one snapshot: no I/O, no state. The error for each way routing can fail is
fixed by SPEC §4 (status and code); batch items reuse the message behind ``routing: ``.

A model is listed when it is enabled, has an enabled binding on an enabled host, and a grant of the
policy matches it on that binding's host.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from relay.domain.grants import grant_matches
from relay.errors import Forbidden, NotFound, Unavailable
from relay.snapshot import Binding, Host, HostKey, Model, Policy, Snapshot


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


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a request goes: the model, the chosen binding and host, and the pool's usable keys there."""

    model: Model
    binding: Binding
    host: Host
    keys: tuple[HostKey, ...]  # the policy's pool keys on this host, in pool order, enabled, with a value

    @property
    def upstream_model(self) -> str:
        return self.binding.upstream_name or self.model.name


PLAN_MEMO_SIZE = 4096
"""Plans remembered per snapshot (``Snapshot.plans``); past that, each is worked out again."""


def resolve(policy: Policy, requested: str, snapshot: Snapshot) -> Plan:
    """SPEC §4: model (or ``model@host``) under ``policy`` → plan, or the exact §4 error.

    A plan depends on the snapshot alone (breakers are the key pool's), so a routed one is
    remembered per snapshot: every request after a policy's first for a model costs one dict lookup.
    Errors are worked out each time (their messages are built per request)."""
    memo = snapshot.plans
    hit = memo.get((policy.id, requested))
    if hit is not None and hit[0] is policy:
        return hit[1]  # type: ignore[no-any-return]
    plan = _resolve(policy, requested, snapshot)
    if len(memo) < PLAN_MEMO_SIZE:
        memo[(policy.id, requested)] = (policy, plan)
    return plan


def _resolve(policy: Policy, requested: str, snapshot: Snapshot) -> Plan:
    name, _, pinned = requested.strip().partition("@")
    model = snapshot.model_by_name.get(name)
    if model is None or (pinned and pinned not in snapshot.host_by_name):
        message = f'model "{requested.strip()}" not found'
        suggestion = closest_granted(policy, name, snapshot) if model is None else None
        if suggestion is not None:
            message += f'; did you mean "{suggestion}"?'
        raise NotFound(message, code="model_not_found")
    if not model.enabled:
        raise Forbidden(f'model "{model.name}" is disabled', code="model_disabled")
    granted: list[tuple[Binding, Host]] = []
    for binding in snapshot.bindings_by_model.get(model.id, ()):
        host = snapshot.hosts.get(binding.host_id)
        if host is None or (pinned and host.name != pinned):
            continue
        if any(
            grant_matches(g, model=model.name, aliases=model.aliases, provider=model.provider, host=host.name)
            for g in policy.grants
        ):
            granted.append((binding, host))
    if not granted and not _granted_anywhere(policy, model, pinned or None):
        raise Forbidden(
            f'policy "{policy.name}" does not allow model "{requested.strip()}"', code="model_not_allowed"
        )
    pool = [snapshot.host_keys[k] for k in policy.host_key_ids if k in snapshot.host_keys]
    for binding, host in granted:
        if not binding.enabled or not host.enabled:
            continue
        on_host = [k for k in pool if k.host_id == host.id]
        if not on_host:
            continue
        usable = tuple(k for k in on_host if k.enabled and k.value)
        if not usable:
            raise Unavailable(
                f'no enabled key of host "{host.name}" in policy "{policy.name}"', code="no_keys"
            )
        return Plan(model, binding, host, usable)
    raise Unavailable(
        f'no enabled binding of model "{model.name}" is on a host with keys in policy "{policy.name}"',
        code="no_binding",
    )


SUGGEST_MAX_CHARS = 128
"""Longer names get no suggestion: comparing strings costs their product, and no model name is that long."""
SUGGEST_MAX_CANDIDATES = 1000
"""A policy granting more names than this gets no suggestion: about 15 µs per name compared."""
SUGGEST_MEMO_SIZE = 1024
"""Suggestions remembered per snapshot (a new snapshot starts empty); past that, each is computed."""


def closest_granted(policy: Policy, name: str, snapshot: Snapshot) -> str | None:
    """The granted model name or alias closest to an unknown ``name`` (difflib's ratio ≥ 0.6), for a
    "did you mean" on ``model_not_found``. Only what ``policy`` grants is a candidate, so the answer
    never names a model the caller cannot use (nor reveals that one exists). Paid on that error only,
    once per snapshot, policy and name (``Snapshot.suggestions``): about 3 ms for 200 granted names."""
    if not name or len(name) > SUGGEST_MAX_CHARS:
        return None
    memo = snapshot.suggestions
    key = (policy.id, name)
    if key in memo:
        return memo[key]
    candidates = [
        alias for model in granted_models(policy, snapshot) for alias in (model.name, *model.aliases)
    ]
    found = None
    if len(candidates) <= SUGGEST_MAX_CANDIDATES:
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        found = close[0] if close else None
    if len(memo) < SUGGEST_MEMO_SIZE:
        memo[key] = found
    return found


def _granted_anywhere(policy: Policy, model: Model, pinned: str | None) -> bool:
    """For a model with no binding to judge by: granted by a grant that names no host (or the pinned
    one) — a host-specific grant cannot allow a model that is not bound on that host."""
    return any(
        grant_matches(g, model=model.name, aliases=model.aliases, provider=model.provider, host=pinned)
        for g in policy.grants
        if g.host is None or g.host == pinned
    )
