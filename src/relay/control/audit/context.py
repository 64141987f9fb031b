"""Who is asking, for the audit entries a control-plane request appends: the actor, the client's
address and user agent, and the request id that ``X-Relay-Request-ID`` carries back.

Why a context variable. Every write the control plane makes (catalog, keys, tokens, apply, batches,
sign-ins) runs several service layers below the HTTP handler, and the dashboard reaches the same
services through its own pages; threading four values through every signature would touch each of
them for a concern none of them has. ``ControlGuard`` opens one context per HTTP request (the id it
sends back, the address, the user agent, and the admin token as actor, since every non-session
``/api`` route is behind it); the dashboard narrows the actor to the signed-in user. A
``contextvars.ContextVar`` is per task, so concurrent requests never see each other's.

What it deliberately does not know: entries, transactions, the database.

Invariant: outside any request (a test calling a service, a CLI seeding the catalog) the context is
the admin token with no address, user agent or request id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Actor:
    kind: str  # "admin_token" | "user" | "oidc"
    id: str | None = None
    email: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.id is not None:
            out["id"] = self.id
        if self.email is not None:
            out["email"] = self.email
        return out


ADMIN = Actor("admin_token")


@dataclass(frozen=True, slots=True)
class RequestContext:
    actor: Actor = ADMIN
    ip: str | None = None
    user_agent: str | None = None
    request_id: str | None = None


OUTSIDE = RequestContext()  # frozen: safe to share as the default
_current: ContextVar[RequestContext] = ContextVar("relay_audit_context", default=OUTSIDE)


def current() -> RequestContext:
    return _current.get()


@contextmanager
def request_scope(*, request_id: str, ip: str | None, user_agent: str | None) -> Iterator[None]:
    """The context of one HTTP request, for as long as its handler runs."""
    token = _current.set(RequestContext(ADMIN, ip, (user_agent or None) and user_agent[:512], request_id))
    try:
        yield
    finally:
        _current.reset(token)


def act_as(actor: Actor) -> None:
    """Narrow the current request's actor (the dashboard's signed-in viewer)."""
    _current.set(replace(_current.get(), actor=actor))
