"""What a batch retry selects (SPEC §17 "Retry"): the body of ``POST /v1/batches/{id}/retry`` as a value.

What it does. :func:`parse_retry_body` reads the optional body ``{"states": [...], "errors": [...]}``
into a :class:`RetrySelection`: the item states to retry (``discarded``, ``cancelled``; default both)
and, optionally, the error prefixes an item's error must start with (a cancelled item's error is
``cancelled``). Anything else is an :class:`~relay.errors.InvalidRequest` (400) whose message names the
field (``states[1]: …``), before anything is read or written.

Why strict. A retry copies work the caller pays for again: a misspelt field (``"state"``) or an empty
list silently selecting everything, or nothing, is worse than a 400 that says which field is wrong.

What it deliberately does not know. The database (``relay.store.batch_queue._retry`` turns a selection
into SQL) and HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from relay.domain.batches import CANCELLED, DISCARDED
from relay.errors import Conflict, InvalidRequest

RETRY_STATES: Final = (DISCARDED, CANCELLED)
MAX_PREFIXES: Final = 100
MAX_PREFIX_CHARS: Final = 1_000
_FIELDS: Final = ("states", "errors")


@dataclass(frozen=True, slots=True)
class RetrySelection:
    """The items of a finished batch a retry takes: state in ``states`` and, when ``errors`` is not
    None, an error starting with one of its prefixes."""

    states: tuple[str, ...] = RETRY_STATES
    errors: tuple[str, ...] | None = None


class BatchNotFinished(Conflict):
    """409 ``batch_not_finished``: what needs every item of a batch final (a retry, a delete) and
    found one that is not. The one class for both, so clients branch on one code."""

    code = "batch_not_finished"


class NothingToRetry(Conflict):
    code = "nothing_to_retry"

    def __init__(self) -> None:
        super().__init__("no item of the batch matches the retry's states and errors")


def parse_retry_body(body: Any) -> RetrySelection:
    """The selection of a retry body already parsed from JSON (``None``: no body, the defaults)."""
    if body is None:
        return RetrySelection()
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object with optional states and errors")
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: unknown field (a retry takes states and errors)")
    states = _strings(body.get("states"), "states")
    errors = _strings(body.get("errors"), "errors")
    if states is not None:
        for i, state in enumerate(states):
            if state not in RETRY_STATES:
                raise InvalidRequest(f"states[{i}]: unknown state {state!r}: use discarded or cancelled")
    if errors is not None:
        if len(errors) > MAX_PREFIXES:
            raise InvalidRequest(f"errors: at most {MAX_PREFIXES} prefixes are allowed")
        for i, prefix in enumerate(errors):
            if len(prefix) > MAX_PREFIX_CHARS:
                raise InvalidRequest(f"errors[{i}]: a prefix is at most {MAX_PREFIX_CHARS} characters")
    return RetrySelection(
        states=tuple(s for s in RETRY_STATES if s in states) if states is not None else RETRY_STATES,
        errors=tuple(dict.fromkeys(errors)) if errors is not None else None,
    )


def _strings(value: Any, field: str) -> list[str] | None:
    """A non-empty list of strings (None when the field is absent or null), else 400 naming it."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequest(f"{field} must be a list of strings")
    if not value:
        raise InvalidRequest(f"{field} must not be empty (leave it out for the default)")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidRequest(f"{field}[{i}]: must be a string")
    return value
