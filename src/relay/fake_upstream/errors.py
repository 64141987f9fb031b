"""Error bodies in each provider's exact shape, so the gateway's error mapping sees what it would in prod."""

from __future__ import annotations

from typing import Literal

import orjson

Shape = Literal["openai", "anthropic"]

# (OpenAI type, OpenAI code, Anthropic type, default message) per status, as the real APIs answer.
_KINDS: dict[int, tuple[str, str | None, str, str]] = {
    400: ("invalid_request_error", None, "invalid_request_error", "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "authentication_error", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("invalid_request_error", "unknown_url", "not_found_error", "Not found."),
    405: ("invalid_request_error", "method_not_allowed", "invalid_request_error", "Method not allowed."),
    408: ("timeout", None, "timeout_error", "Request timed out."),
    413: ("invalid_request_error", "request_too_large", "request_too_large", "Request too large."),
    429: ("requests", "rate_limit_exceeded", "rate_limit_error", "Rate limit reached for requests."),
    500: (
        "server_error",
        None,
        "api_error",
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", None, "api_error", "Bad gateway."),
    503: ("server_error", None, "api_error", "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "timeout_error", "Gateway timeout."),
    529: ("server_error", None, "overloaded_error", "Overloaded"),
}


def _kind(status: int) -> tuple[str, str | None, str, str]:
    if status in _KINDS:
        return _KINDS[status]
    if status >= 500:
        return ("server_error", None, "api_error", f"Upstream error {status}.")
    return ("invalid_request_error", None, "invalid_request_error", f"Request failed with status {status}.")


def error_body(shape: Shape, status: int, message: str | None = None, code: str | None = None) -> bytes:
    """OpenAI: ``{"error": {message, type, param, code}}``; Anthropic: ``{"type": "error", "error": …}``."""
    openai_type, openai_code, anthropic_type, default_message = _kind(status)
    text = message or default_message
    if shape == "anthropic":
        return orjson.dumps({"type": "error", "error": {"type": anthropic_type, "message": text}})
    return orjson.dumps(
        {"error": {"message": text, "type": openai_type, "param": None, "code": code or openai_code}}
    )


class BadRequest(Exception):
    """A request the real provider would reject with 400; the message is shown to the client."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
