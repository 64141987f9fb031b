"""The OpenAI Batches façade's pure rules (SPEC §14 Batches): the create parameters, the input file's
lines, and the output and error file lines.

What it does. :func:`check_create` checks a create body's parameters (400 naming ``param``);
:class:`LineChecker` checks the input file line by line (``custom_id``, ``method``, ``url``, ``body``,
``body.stream``, unique ids, 1 to ``max_items`` lines), keeps each valid line's ``custom_id`` and hands
back its request body (the caller writes it; the checker holds no body, so a million lines cost their
ids only); :func:`output_line` and :func:`error_line` render one item of the output and error
files; :func:`error_code` maps an item's §10.4 error text to the error file's ``code``.

What it deliberately does not know. Files, the database, HTTP: the caller feeds lines and writes
what comes back. Ids are minted by the caller (``mint_id``) and passed in.

Invariants. Line numbers are 1-based and count every line of the file, blank ones included (a blank
line is skipped, not an error, so a trailing newline is harmless). A duplicate ``custom_id`` is
reported on its later line. Errors are kept up to :data:`MAX_ERRORS` (the batch fails either way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from relay.errors import InvalidRequest

#: The item shape of each endpoint (SPEC §14: §10's shape rule; embeddings can be batched here).
ENDPOINT_SHAPES: Final = {
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai_responses",
    "/v1/embeddings": "openai_embeddings",
}
COMPLETION_WINDOW: Final = "24h"
EXPIRES_AFTER_RANGE: Final = (3600, 2_592_000)
METADATA_PAIRS: Final = 16
METADATA_KEY_CHARS: Final = 64
METADATA_VALUE_CHARS: Final = 512
MAX_ERRORS: Final = 1000
CREATE_FIELDS: Final = ("input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after")


class BadParam(InvalidRequest):
    """A 400 whose OpenAI error names the parameter (``param``)."""

    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class CreateParams:
    input_file_id: str
    endpoint: str
    metadata: dict[str, str] | None
    output_expires_after_s: int | None

    @property
    def shape(self) -> str:
        return ENDPOINT_SHAPES[self.endpoint]


def check_create(body: Any) -> CreateParams:
    """The create body's parameters, or :class:`BadParam` naming the first bad one."""
    if not isinstance(body, dict):
        raise BadParam(None, "the body must be a JSON object")
    unknown = sorted(set(body) - set(CREATE_FIELDS))
    if unknown:
        raise BadParam(unknown[0], f"unknown parameter {unknown[0]!r}")
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise BadParam("input_file_id", "input_file_id is required and must be a file id")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINT_SHAPES:
        raise BadParam("endpoint", f"endpoint must be one of {', '.join(ENDPOINT_SHAPES)}")
    if body.get("completion_window") != COMPLETION_WINDOW:
        raise BadParam("completion_window", "completion_window must be 24h")
    return CreateParams(
        file_id,
        str(endpoint),
        _metadata(body.get("metadata")),
        _expires_after(body.get("output_expires_after")),
    )


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadParam("metadata", "metadata must be an object of string values")
    if len(value) > METADATA_PAIRS:
        raise BadParam("metadata", f"metadata holds at most {METADATA_PAIRS} pairs")
    for key, item in value.items():
        if len(key) > METADATA_KEY_CHARS:
            raise BadParam("metadata", f"metadata keys are at most {METADATA_KEY_CHARS} characters")
        if not isinstance(item, str) or len(item) > METADATA_VALUE_CHARS:
            raise BadParam(
                "metadata", f"metadata values are strings of at most {METADATA_VALUE_CHARS} characters"
            )
    return dict(value)


def _expires_after(value: Any) -> int | None:
    if value is None:
        return None
    low, high = EXPIRES_AFTER_RANGE
    if not isinstance(value, dict) or set(value) != {"anchor", "seconds"}:
        raise BadParam("output_expires_after", "output_expires_after must be {anchor, seconds}")
    if value["anchor"] != "created_at":
        raise BadParam("output_expires_after.anchor", "output_expires_after.anchor must be created_at")
    seconds = value["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise BadParam(
            "output_expires_after.seconds", f"output_expires_after.seconds must be {low} to {high}"
        )
    return seconds


@dataclass
class LineChecker:
    """Feed the input file's lines in order (each valid one's body comes back); then :meth:`errors`
    (empty: valid) and ``custom_ids``."""

    endpoint: str
    max_items: int
    custom_ids: list[str] = field(default_factory=list)
    _errors: list[dict[str, Any]] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)
    _lines: int = 0
    _requests: int = 0
    _too_many: bool = False
    _failed: bool = False

    def feed(self, raw: bytes) -> bytes | None:
        """The line's request body as JSON bytes when it is a valid request, else None (a blank line,
        or a bad one: then it is among :meth:`errors`)."""
        self._lines += 1
        if not raw.strip():
            return None
        self._requests += 1
        if self._requests > self.max_items:
            self._too_many = True
        if self._too_many:
            return None
        checked = self._check(raw)
        if isinstance(checked, tuple):
            code, param, message = checked
            if len(self._errors) < MAX_ERRORS:
                self._errors.append({"code": code, "message": message, "line": self._lines, "param": param})
            self._failed = True
            return None
        return checked

    @property
    def failed(self) -> bool:
        """A line so far was bad, or there are too many: the batch fails, whatever comes next."""
        return self._failed or self._too_many

    @property
    def past_limit(self) -> bool:
        """More than ``max_items`` requests: no later line changes :meth:`errors`."""
        return self._too_many

    def _check(self, raw: bytes) -> tuple[str, str | None, str] | bytes:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "invalid_json_line", None, "this line is not valid JSON"
        if not isinstance(line, dict):
            return "invalid_json_line", None, "each line must be a JSON object"
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            return "invalid_custom_id", "custom_id", "custom_id is required and must be a string"
        if line.get("method") != "POST":
            return "invalid_method", "method", "method must be POST"
        if line.get("url") != self.endpoint:
            return "invalid_url", "url", f"url must be the batch's endpoint {self.endpoint}"
        body = line.get("body")
        if not isinstance(body, dict):
            return "invalid_body", "body", "body must be a JSON object"
        if body.get("stream") is True:
            return "invalid_body", "body.stream", "body.stream must not be true: batch items are not streamed"
        if custom_id in self._seen:
            return "duplicate_custom_id", "custom_id", f"custom_id {custom_id!r} is used by an earlier line"
        self._seen.add(custom_id)
        self.custom_ids.append(custom_id)
        return orjson.dumps(body)

    def errors(self) -> list[dict[str, Any]]:
        if self._too_many:
            message = f"the file has more than {self.max_items} requests (RELAY_BATCH_MAX_ITEMS)"
            return [
                *self._errors,
                {"code": "too_many_requests", "message": message, "line": None, "param": None},
            ]
        if not self._requests:
            return [
                {"code": "empty_file", "message": "the file has no requests", "line": None, "param": None}
            ]
        return list(self._errors)


#: (error text prefix, error file code) for items that did not complete without an upstream answer.
_CODES: Final = (
    ("routing: ", "routing_error"),
    ("rate limit exceeded: ", "rate_limit_exceeded"),
    ("budget exceeded: ", "budget_exceeded"),
    ("credential no longer valid: ", "credential_invalid"),
    ("policy unavailable: ", "policy_unavailable"),
    ("cross-shape dispatch: ", "cross_shape"),
    ("all keys of host ", "upstream_unavailable"),
    ("no healthy keys for host ", "upstream_unavailable"),
    ("worker lost: ", "worker_lost"),
    ("timeout: ", "request_timeout"),
    ("expired: ", "batch_expired"),
    ("cancelled", "batch_cancelled"),
    ("load input: ", "load_input"),
)


def error_code(error: str) -> str:
    """The error file's ``code`` of an item's §10.4 error text (``internal_error`` for the rest)."""
    for prefix, code in _CODES:
        if error.startswith(prefix):
            return code
    return "internal_error"


def output_line(line_id: str, custom_id: str | None, status: int, request_id: str, body: bytes) -> bytes:
    """One output file line: a completed item with the upstream's JSON body."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = body.decode("utf-8", "replace")
    response = {"status_code": status, "request_id": request_id, "body": parsed}
    return orjson.dumps({"id": line_id, "custom_id": custom_id, "response": response, "error": None})


def error_line(line_id: str, custom_id: str | None, error: str, status: int | None, request_id: str) -> bytes:
    """One error file line: an upstream's non-2xx answer as a response, anything else as an error."""
    if error.startswith("upstream returned ") and status is not None:
        body = {"error": {"message": error, "type": "upstream_error"}}
        response = {"status_code": status, "request_id": request_id, "body": body}
        return orjson.dumps({"id": line_id, "custom_id": custom_id, "response": response, "error": None})
    failure = {"code": error_code(error), "message": error}
    return orjson.dumps({"id": line_id, "custom_id": custom_id, "response": None, "error": failure})
