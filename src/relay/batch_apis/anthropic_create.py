"""What a valid Anthropic Message Batches create is (SPEC §15): ``{"requests": [{"custom_id", "params"},
…]}``, checked request by request with one rule for a body parsed whole (:func:`validate_create`) and
one read while its bodies are written (:class:`StreamedCreate`, a spooled body over 1 MiB).

Why one :func:`check_request`. The two paths must refuse the same requests with the same messages
(``requests[3].custom_id: …``); only the envelope's refusals differ where the stream cannot know
(a count over the limit is "more than" the limit: the rest is not read; a key given twice is refused).

What it deliberately does not know: the engine, HTTP, where the bodies go.
"""

from __future__ import annotations

import re
from typing import IO, Any, Final

from relay.batches.submission import StreamedItems, item_bytes
from relay.domain.batches import BatchRejected

CUSTOM_ID_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NOT_AN_OBJECT: Final = "the body must be a JSON object with requests"


def check_request(index: int, request: Any, seen: dict[str, int]) -> tuple[dict[str, Any], str]:
    """``(params, custom_id)`` of ``requests[index]``, or :class:`BatchRejected` naming it; ``seen``
    (custom_id → its index) gains its custom_id."""
    where = f"requests[{index}]"
    if not isinstance(request, dict):
        raise BatchRejected(f"{where}: must be an object with custom_id and params")
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str):
        raise BatchRejected(f"{where}.custom_id: field required, a string")
    if not CUSTOM_ID_RE.fullmatch(custom_id):
        raise BatchRejected(f"{where}.custom_id: must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -")
    if custom_id in seen:
        raise BatchRejected(
            f"{where}.custom_id: {custom_id!r} is already the custom_id of requests[{seen[custom_id]}]"
        )
    seen[custom_id] = index
    params = request.get("params")
    if not isinstance(params, dict):
        raise BatchRejected(f"{where}.params: field required, a Messages request object")
    if params.get("stream") is True:
        raise BatchRejected(f"{where}.params.stream: a batch request cannot stream")
    unknown = sorted(set(request) - {"custom_id", "params"})
    if unknown:
        raise BatchRejected(f"{where}.{unknown[0]}: unknown field")
    return params, custom_id


def validate_create(body: Any, max_items: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``(params, custom_ids)`` of a valid create body, in submit order; else :class:`BatchRejected`
    with the first problem, named by its request."""
    if not isinstance(body, dict):
        raise BatchRejected(NOT_AN_OBJECT)
    requests = body.get("requests")
    if requests is None:
        raise BatchRejected("requests: field required")
    if not isinstance(requests, list):
        raise BatchRejected("requests: must be a list of {custom_id, params}")
    if not requests:
        raise BatchRejected("requests: must not be empty")
    if len(requests) > max_items:
        raise BatchRejected(
            f"requests: {len(requests)} requests is more than the limit of {max_items}"
            " (RELAY_BATCH_MAX_ITEMS)"
        )
    params_out: list[dict[str, Any]] = []
    custom_ids: list[str] = []
    seen: dict[str, int] = {}
    for index, request in enumerate(requests):
        params, custom_id = check_request(index, request, seen)
        params_out.append(params)
        custom_ids.append(custom_id)
    return params_out, custom_ids


class StreamedCreate(StreamedItems):
    """A spooled create: iterating it yields each request's ``params`` as JSON bytes; ``custom_ids``
    is complete when the iteration has ended without a refusal. ``max_depth`` bounds one request
    (``{custom_id, params}``)."""

    not_json = NOT_AN_OBJECT

    def __init__(self, source: IO[bytes], max_items: int, max_depth: int) -> None:
        super().__init__(source, max_items, max_depth)
        self._custom_ids: list[str] = []
        self._index_of: dict[str, int] = {}

    @property
    def shape(self) -> str:
        return "anthropic"

    @property
    def custom_ids(self) -> list[str]:
        return self._custom_ids

    def _after(self) -> None:
        if "requests" not in self._seen:
            raise BatchRejected("requests: field required")

    def _list_refusal(self, problem: str) -> str:
        if problem == "not_a_list":
            return "requests: must be a list of {custom_id, params}"
        if problem == "empty":
            return "requests: must not be empty"
        limit = self._max_items
        return f"requests: more than {limit} requests; the limit is {limit} (RELAY_BATCH_MAX_ITEMS)"

    def _not_an_item(self, index: int) -> str:
        return f"requests[{index}]: must be an object with custom_id and params"

    def _item(self, index: int, item: dict[str, Any]) -> bytes:
        params, custom_id = check_request(index, item, self._index_of)
        body = item_bytes(index, params)
        self._custom_ids.append(custom_id)
        return body
