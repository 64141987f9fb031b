"""Routing with fallbacks (SPEC §4 step 5): where a request goes first, and which model to try next
when the requested one cannot answer.

What it does: :func:`route` is the one routing step of both planes — the requested model's plan (or,
when it cannot be routed, its first usable fallback) plus the lazy candidates after it.
:class:`Fallbacks` walks the governing policy's ``fallbacks`` list of the *requested* model (never a
fallback's own list), routes each candidate under the same policy (grants apply), and hands the
pipeline the next usable plan with the wire shape and body to send. Each model is tried at most once
per request, so fallbacks never loop. A candidate that is unknown, disabled, not granted, has no
binding or keys in the pool, or is refused by ``admit`` (a shape the caller cannot be served in) is
skipped. :func:`is_trigger` says which errors send a request to its fallbacks.

What it does not know: upstreams, limits, HTTP, and which plane asks. It is pure over one snapshot;
the loop that tries the plans, before the first byte only, is ``Pipeline.run``.

Admission (the shape question) is the caller's ``admit`` function: live requests pass the one
function that decides same-shape / translate / refuse for their primary plan too, so a cross-shape
fallback is served exactly when (and as) a cross-shape primary would be; batch items pass their
same-shape rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.errors import RelayError
from relay.request.routing import Plan, resolve
from relay.snapshot import Policy, Snapshot

#: Error codes after which the next model of the list is tried (SPEC §4 step 5). ``upstream_unavailable``
#: covers "a 429 after failover": every key answered 429 (or failed otherwise).
TRIGGERS = frozenset(("upstream_unavailable", "no_healthy_keys", "no_keys", "no_binding"))

#: ``admit(plan)`` → (wire shape to send, body to send), or raises ``RelayError`` to skip the plan.
Admit = Callable[[Plan], tuple[str, dict]]


def is_trigger(exc: BaseException) -> bool:
    return isinstance(exc, RelayError) and exc.code in TRIGGERS


@dataclass(slots=True)
class Candidate:
    plan: Plan
    shape: str
    body: dict


class Fallbacks:
    """The fallback candidates of one request, produced lazily (a request that succeeds routes none)."""

    def __init__(
        self, policy: Policy, requested_model_id: str, requested_name: str, snapshot: Snapshot, admit: Admit
    ) -> None:
        self.requested_name = requested_name
        self._policy = policy
        self._snapshot = snapshot
        self._admit = admit
        self._names = iter(policy.fallbacks.get(requested_model_id, ()))
        self._tried = {requested_model_id}

    def next(self) -> Candidate | None:
        """The next usable fallback, or None when the list is exhausted."""
        for name in self._names:
            model = self._snapshot.model_by_name.get(name)
            if model is None or model.id in self._tried:
                continue
            self._tried.add(model.id)
            try:
                plan = resolve(self._policy, model.name, self._snapshot)
                shape, body = self._admit(plan)
            except RelayError:
                continue  # not granted, disabled, no binding or keys, another shape: skipped
            return Candidate(plan, shape, body)
        return None


def fallbacks_for(policy: Policy, requested: str, snapshot: Snapshot, admit: Admit) -> Fallbacks | None:
    """The request's fallbacks, or None when the policy names none for the requested model (the common
    case: one dict lookup)."""
    if not policy.fallbacks:
        return None
    model = snapshot.model_by_name.get(requested.strip().partition("@")[0])
    if model is None or model.id not in policy.fallbacks:
        return None
    return Fallbacks(policy, model.id, model.name, snapshot, admit)


@dataclass(slots=True)
class Route:
    """Where a request goes first. ``primary_error`` is set when the requested model itself could not
    be routed (``no_binding`` / ``no_keys``) and ``plan`` is already its first usable fallback."""

    plan: Plan
    shape: str
    body: dict
    fallbacks: Fallbacks | None
    primary_error: RelayError | None = None

    @property
    def fallback_from(self) -> str | None:
        return self.fallbacks.requested_name if self.primary_error is not None and self.fallbacks else None

    @property
    def requested_plan(self) -> Plan | None:
        """The requested model's own plan; None when it could not be routed (``plan`` is a fallback's)."""
        return self.plan if self.primary_error is None else None


class NotAdmitted(Exception):
    """The requested model routed, but its plan's admission refused the request (``error``): the
    caller learns which ``plan`` it was (a live refusal records it; a batch item's does not)."""

    def __init__(self, error: RelayError, plan: Plan) -> None:
        super().__init__(error.message)
        self.error = error
        self.plan = plan


def route(policy: Policy, requested: str, snapshot: Snapshot, admit: Admit) -> Route:
    """Where a request for ``requested`` goes first, with its lazy fallbacks (SPEC §4, step 5): the
    one routing step of live requests and batch items alike.

    The requested model's plan when it routes and ``admit`` takes it (a refusal raises
    :class:`NotAdmitted`: the primary is never skipped for a shape question); when it does not route,
    its first usable fallback if the error is a trigger (``no_binding`` / ``no_keys``), else the
    routing error as it is."""
    try:
        plan = resolve(policy, requested, snapshot)
    except RelayError as exc:
        fallbacks = fallbacks_for(policy, requested, snapshot, admit) if is_trigger(exc) else None
        candidate = fallbacks.next() if fallbacks is not None else None
        if fallbacks is None or candidate is None:
            raise
        return Route(candidate.plan, candidate.shape, candidate.body, fallbacks, exc)
    try:
        shape, body = admit(plan)
    except RelayError as exc:
        raise NotAdmitted(exc, plan) from None
    return Route(plan, shape, body, fallbacks_for(policy, requested, snapshot, admit))
