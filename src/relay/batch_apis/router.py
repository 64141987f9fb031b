"""One route dispatcher for the batch APIs' raw-ASGI apps: the native batch API (SPEC §10), the OpenAI
Batches and Files façades (§14) and Anthropic Message Batches (§15).

What it does. Each app declares its routes as a table (:class:`ApiRoute`: a method and a path pattern
below the app's prefix, ``{id}`` standing for one segment, compiled by Starlette's ``compile_path``)
and subclasses :class:`RoutedApp`, which owns the request's plumbing: the request id, the headers,
the credential, matching the path (a 404 ``no route for …`` when no pattern fits, a 405 with
``Allow`` listing the table's methods for that path when the method does not), then calling the
handler with an :class:`ApiCall`. Every refusal, the 404 and 405 included, is rendered by the app's
:meth:`RoutedApp.error_body` in its caller's shape (§10's and §14's OpenAI body, §15's Anthropic one,
all ``relay.http.errors``'); any other failure is ``relay.http.errors.escaped``'s JSON 503 of a
database that is away (as the store's ``database_unavailable``, handed in by ``boot``, says) or a 500,
never a traceback. :func:`create_once` is every API's create: the caller with a usable
policy, the body read whole within ``RELAY_BATCH_MAX_BYTES``, an ``Idempotency-Key`` replayed.

Why one place. The four apps grew the same preamble, the same ``if not parts … elif len(parts) ==
1`` ladder and the same two ``except`` branches; a fix to one (an ``Allow`` header, a request id)
had to be made four times.

Why not Starlette's ``Router``: its 404 and 405 answers are text, without each API's error shape, and
it does not fold empty segments; its path compiler is what this module reuses.

What it deliberately does not know. The services (an app passes its handlers, and its create to
:func:`create_once`), the database, the payload stores and each app's body limit (a handler reads
its body: whole, or streamed, the Files upload).

Invariants. Empty path segments are ignored (``/v1/batches//b_x/`` is ``/v1/batches/b_x``); the
``Allow`` header lists the methods in the table's order; the credential is read before anything else,
and authenticated only by the handler (or :meth:`RoutedApp.screen`), so a 404 or 405 needs no key unless
an app says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from starlette.routing import compile_path
from starlette.types import Receive, Scope, Send

from relay.batch_apis import idempotency
from relay.batch_apis.idempotency import IdempotencyClaim
from relay.batches.new_batch import Answer
from relay.domain.credentials import read_credential
from relay.errors import NotFound, RelayError
from relay.http.errors import error_headers, escaped, relay_error_body
from relay.http.spool import SpooledBody, spool_body
from relay.http.wire import MethodNotAllowed, new_request_id, read_body, request_headers, send_bytes
from relay.request.auth import Principal, authenticate, authenticate_owner
from relay.snapshot import Snapshot

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(slots=True)
class ApiCall:
    """One request as a handler sees it: what it asked, who asks, and how to answer."""

    scope: Scope
    receive: Receive
    send: Send
    request_id: str
    headers: dict[str, str]
    snapshot: Callable[[], Snapshot]
    credential: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    _owner: str | None = field(default=None, init=False, repr=False)

    @property
    def id(self) -> str:
        """The path's ``{id}`` segment."""
        return self.params["id"]

    def owner(self) -> str:
        """The caller as a batch owner: a valid credential, no policy needed (SPEC §10.8)."""
        if self._owner is None:
            self._owner = authenticate_owner(
                self.credential, self.snapshot(), authorization=self.headers.get("authorization")
            )
        return self._owner

    def principal(self) -> Principal:
        """The caller with a usable policy (what a create needs, SPEC §10.1)."""
        return authenticate(self.credential, self.snapshot(), authorization=self.headers.get("authorization"))

    async def json(self, status: int, body: bytes, extra: Headers = ()) -> None:
        await send_bytes(self.send, status, body, "application/json", self.request_id, extra)


C = TypeVar("C", bound=ApiCall)


class Create(Protocol):
    """A service's create: the caller, the body as received (``bytes``; with ``create_once(spool=True)``
    a ``SpooledBody`` when it is over 1 MiB), its idempotency claim → the answer."""

    def __call__(
        self, principal: Principal, raw: Any, *, idempotency: IdempotencyClaim | None
    ) -> Awaitable[Answer]: ...


async def create_once(
    call: ApiCall,
    route: str,
    max_bytes: int,
    replay: Callable[[IdempotencyClaim], Awaitable[Answer | None]],
    create: Create,
    *,
    spool: bool = False,
) -> None:
    """A batch create of any API, answered: the caller needs a usable policy (SPEC §10.1), the body is
    read whole within ``max_bytes`` (``RELAY_BATCH_MAX_BYTES``), and a create carrying an
    ``Idempotency-Key`` already answered for ``route`` gets that answer again (SPEC §10.10). With
    ``spool``, a body over 1 MiB is read into a temporary file (``relay.http.spool``) that ``create``
    parses as it goes, removed once answered."""
    principal = call.principal()
    setting = "RELAY_BATCH_MAX_BYTES"
    if spool:
        body: bytes | SpooledBody = await spool_body(
            call.receive, call.scope, max_bytes, what="batch body", setting=setting
        )
    else:
        body = await read_body(call.receive, call.scope, max_bytes, what="batch body", setting=setting)
    try:
        header = call.headers.get(idempotency.HEADER)
        if isinstance(body, SpooledBody):
            claim = await idempotency.claim_from_spool(header, principal.owner, route, body)
        else:
            claim = idempotency.claim_from(header, principal.owner, route, body)
        answer = await replay(claim) if claim is not None else None
        if answer is None:
            answer = await create(principal, body, idempotency=claim)
    finally:
        if isinstance(body, SpooledBody):
            body.close()
    await call.json(answer.status_code, answer.body)


@dataclass(frozen=True, slots=True)
class ApiRoute(Generic[C]):
    """``method`` on ``path`` (segments below the prefix, ``""`` for the prefix itself) → ``handler``."""

    method: str
    path: str
    handler: Callable[[C], Awaitable[None]]
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern, _format, _convertors = compile_path("/" + "/".join(p for p in self.path.split("/") if p))
        object.__setattr__(self, "pattern", pattern)

    def fit(self, parts: Sequence[str]) -> dict[str, str] | None:
        """The ``{name}`` segments of ``parts`` when the path fits them, else None."""
        found = self.pattern.fullmatch("/" + "/".join(parts))  # not match: "$" passes a final "\n"
        return None if found is None else found.groupdict()


def match(
    routes: Sequence[ApiRoute[C]], method: str, parts: Sequence[str], path: str
) -> tuple[ApiRoute[C], dict[str, str]]:
    """The route of ``method`` on ``parts`` and its ``{name}`` segments; a 405 naming the path's
    methods when only the method is wrong, else a 404."""
    allowed: list[str] = []
    for route in routes:
        params = route.fit(parts)
        if params is None:
            continue
        if route.method == method:
            return route, params
        allowed.append(route.method)
    if allowed:
        raise MethodNotAllowed(*allowed)
    raise NotFound(f"no route for {method} {path}")


class RoutedApp(Generic[C]):
    """A raw-ASGI app of ``routes`` below ``prefix``. Subclasses give the table (their handlers are
    bound methods), their error shape (:attr:`shape`, or :meth:`error_body`) and, when a request needs
    more than an :class:`ApiCall`, the call they want (:meth:`new_call`)."""

    shape: str  # relay.adapters' error shape of an unexpected failure (and of refusals by default)
    what: str  # names a failed request in the log: "<what> <request id> failed"

    def __init__(
        self,
        prefix: str,
        snapshot: Callable[[], Snapshot],
        routes: Sequence[ApiRoute[C]],
        database_unavailable: Callable[[BaseException], bool],
    ) -> None:
        self._prefix = prefix
        self._snapshot = snapshot
        self._routes = tuple(routes)
        self._database_unavailable = database_unavailable

    def new_call(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> C:
        """The call handlers get: a plain :class:`ApiCall` unless the app needs more (Files: its body)."""
        return ApiCall(scope, receive, send, new_request_id(), headers, self._snapshot)  # type: ignore[return-value]

    def screen(self, call: C, parts: Sequence[str]) -> None:
        """Checked before the path is matched (nothing by default; §15 authenticates ``/{id}…``)."""

    def error_body(self, exc: RelayError) -> bytes:
        return relay_error_body(self.shape, exc)

    def refusal(self, exc: Exception) -> RelayError | None:
        """A non-Relay exception that is the caller's fault, as the refusal to send (None: a failure)."""
        return None

    async def send_error(self, call: C, status: int, body: bytes, extra: Headers) -> None:
        await call.json(status, body, extra)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = request_headers(scope)
        call = self.new_call(scope, receive, send, headers)
        try:
            call.credential = read_credential(headers.get("authorization"), headers.get("x-api-key"))
            path: str = scope["path"]
            parts = [p for p in path[len(self._prefix) :].split("/") if p]
            self.screen(call, parts)
            route, call.params = match(self._routes, scope["method"], parts, path)
            await route.handler(call)
        except Exception as exc:
            refused = exc if isinstance(exc, RelayError) else self.refusal(exc)
            if refused is None:
                # Degraded, not broken: a database that is away is a JSON 503 the client retries, never
                # a traceback (nothing was half-written: every write is one transaction).
                refused = escaped(exc, f"{self.what} {call.request_id}", self._database_unavailable)
            await self.send_error(call, refused.status, self.error_body(refused), error_headers(refused))
