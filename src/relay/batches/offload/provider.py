"""What every provider batch API answers, in the engine's terms (SPEC §22): one value for a polled
batch and one for each result line, whatever the provider called them.

Why a seam: the poller maps a provider's batch into the engine's rows (item states, errors, bodies,
usage) without knowing whether OpenAI or Anthropic ran it; each provider module
(``openai_api``, ``anthropic_api``) turns its own objects into these. Adding a provider is one module.

Errors: :class:`ProviderRefused` is a 4xx at create — SPEC §22 runs the batch on Relay's workers
instead, recording :attr:`ProviderRefused.reason`; :class:`ProviderUnavailable` is anything worth
another try later (a 5xx, 429, a connection error, a timeout): the poller backs off and polls again,
nothing is written, so nothing is charged twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from relay.batches.item_shapes import upstream_returned
from relay.domain.batch_record import CANCELLED_ERROR, FinalState
from relay.upstream import UpstreamConnectionError, UpstreamResponse, UpstreamTimeout

#: How a provider batch ended: every line ran, it was cancelled, or its window passed first.
Ending = Literal["completed", "cancelled", "expired", "failed"]


class ProviderRefused(Exception):
    """The provider refused the batch at create (a 4xx): it runs on Relay's workers instead."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ProviderUnavailable(Exception):
    """The provider did not answer usefully this time (5xx, 429, connection, timeout): try later."""


@dataclass(frozen=True, slots=True)
class ProviderBatch:
    """A polled batch. ``state``: the provider's own status word (shown as the batch's provider
    state); ``ending``: None while it runs; ``done`` and ``total``: lines finished so far, of all."""

    id: str
    state: str
    ending: Ending | None
    done: int
    total: int
    #: Why a batch ended ``failed`` as a whole (OpenAI: its input file was refused), else None.
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderLine:
    """One result line as the engine stores an item: ``completed`` with the provider's HTTP status and
    response body (the same bytes a gateway-run item keeps), ``discarded`` with an error text (and the
    status when the provider answered one), or ``cancelled`` (``error`` is then §10.3's ``cancelled``,
    or ``expired: …`` for a batch whose window passed)."""

    custom_id: str
    state: FinalState
    status: int | None
    body: bytes | None
    error: str | None


def never_ran(custom_id: str, ending: Ending) -> ProviderLine:
    """A line the provider never ran: its batch was cancelled, or expired first."""
    if ending == "expired":
        error = "expired: the provider's batch window passed before this item ran"
        return ProviderLine(custom_id, "cancelled", None, None, error)
    return ProviderLine(custom_id, "cancelled", None, None, CANCELLED_ERROR)


def read_line(
    raw: bytes, ending: Ending, line_of: Callable[[dict[str, Any], Ending], ProviderLine]
) -> ProviderLine | None:
    """One result line in the engine's terms, or None for a line that is no readable result (not
    JSON, not an object, fields of the wrong type): skipped, so garbage never stops a mapping; its
    item is then one the provider returned no result for."""
    try:
        value = orjson.loads(raw)
        return line_of(value, ending) if isinstance(value, dict) else None
    except (ValueError, TypeError, AttributeError):
        return None


async def read_answer(response: UpstreamResponse) -> bytes:
    """A provider's answer body; a 429 or 5xx raises :class:`ProviderUnavailable`, another 4xx
    :class:`ProviderRefused`, each with §10.4's ``upstream returned <status>: <provider message>``."""
    body = await response.read()
    if response.status < 300:
        return body
    if response.status == 429 or response.status >= 500:
        raise ProviderUnavailable(upstream_returned(response.status, body))
    raise ProviderRefused(response.status, upstream_returned(response.status, body))


async def answer_lines(response: UpstreamResponse) -> AsyncIterator[bytes]:
    """A JSONL answer's non-empty lines as they arrive: a 50 000-line result file never sits in
    memory whole. Errors as :func:`read_answer`; a connection broken midway is
    :class:`ProviderUnavailable` (the poller maps nothing of a read that did not finish)."""
    if response.status >= 300:
        await read_answer(response)  # raises
    rest = b""
    try:
        async for chunk in response.chunks():
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.strip():
                    yield line
    except (UpstreamConnectionError, UpstreamTimeout) as exc:
        raise ProviderUnavailable(exc.message) from None
    if rest.strip():
        yield rest


class ProviderBatchAPI(Protocol):
    """One provider's native batch API, spoken with one host key of the binding's pool."""

    async def create(self, endpoint: str, lines: Sequence[tuple[str, bytes]]) -> ProviderBatch:
        """Send ``lines`` (``custom_id``, the request body as JSON) to ``endpoint``'s batch API.
        Raises :class:`ProviderRefused` or :class:`ProviderUnavailable`."""
        ...

    async def poll(self, batch_id: str) -> ProviderBatch: ...

    async def cancel(self, batch_id: str) -> ProviderBatch: ...

    def results(self, batch: ProviderBatch) -> AsyncIterator[ProviderLine]:
        """Every line's outcome once ``batch`` ended, in no promised order (match on ``custom_id``)."""
        ...
