from __future__ import annotations

import orjson
import pytest

from relay.adapters import ANTHROPIC
from relay.domain.openai_batches import BadParam
from relay.errors import NotFound, RateLimited, RelayError
from relay.http.errors import (
    ANTHROPIC_SHAPE,
    DatabaseUnavailable,
    error_body,
    error_headers,
    error_type,
    escaped,
    openai_api_error,
)

OPENAI_SHAPES = ["openai", "openai_responses", "embeddings", "canonical", "batches"]

TABLE = [
    (400, "invalid_request_error", "invalid_request_error"),
    (401, "authentication_error", "authentication_error"),
    (403, "permission_error", "permission_error"),
    (404, "not_found_error", "not_found_error"),
    (409, "invalid_request_error", "invalid_request_error"),
    (413, "request_too_large", "request_too_large"),
    (422, "invalid_request_error", "invalid_request_error"),
    (429, "rate_limit_error", "rate_limit_error"),
    (500, "api_error", "api_error"),
    (502, "api_error", "api_error"),
    (503, "api_error", "overloaded_error"),
    (504, "timeout_error", "timeout_error"),
    (529, "overloaded_error", "overloaded_error"),
    (418, "invalid_request_error", "invalid_request_error"),
    (599, "api_error", "api_error"),
]


@pytest.mark.parametrize(("status", "openai_type", "anthropic_type"), TABLE)
def test_type_table(status: int, openai_type: str, anthropic_type: str) -> None:
    assert error_type("openai", status) == openai_type
    assert error_type("anthropic", status) == anthropic_type


@pytest.mark.parametrize("shape", OPENAI_SHAPES)
def test_openai_shape(shape: str) -> None:
    body = orjson.loads(error_body(shape, status=429, code="rate_limit_exceeded", message="slow down"))
    # What the openai SDK reads: body["error"] becomes the exception body; its message/code/type attributes.
    assert body == {
        "error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}
    }


def test_anthropic_shape() -> None:
    body = orjson.loads(
        error_body("anthropic", status=401, code="unauthenticated", message="invalid api key")
    )
    # What the anthropic SDK reads: the whole body, error.type and error.message.
    assert body == {"type": "error", "error": {"type": "authentication_error", "message": "invalid api key"}}


def test_spec_codes_render() -> None:
    body = orjson.loads(
        error_body("openai", status=400, code="invalid_json", message="request body is not valid JSON")
    )
    assert body["error"]["code"] == "invalid_json"
    assert body["error"]["type"] == "invalid_request_error"


def test_message_is_escaped_json() -> None:
    message = 'model "a\nb" not found \u2028 ünïcode'
    assert (
        orjson.loads(error_body("anthropic", status=404, code="model_not_found", message=message))["error"][
            "message"
        ]
        == message
    )


def test_the_anthropic_error_shape_is_the_adapters_anthropic_wire_shape() -> None:
    assert ANTHROPIC_SHAPE == ANTHROPIC


def test_openai_api_errors_name_the_param_and_keep_relay_codes_on_400_and_404() -> None:
    assert orjson.loads(openai_api_error(BadParam("limit", "too big"))) == {
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_request",
            "message": "too big",
            "param": "limit",
        }
    }
    assert orjson.loads(openai_api_error(NotFound("file not found"))) == {
        "error": {"type": "invalid_request_error", "code": "not_found", "message": "file not found"}
    }
    assert openai_api_error(RelayError("internal error")) == error_body(
        "openai", status=500, code="internal_error", message="internal error"
    )


def test_an_escaped_database_outage_is_a_503_with_retry_after(caplog: pytest.LogCaptureFixture) -> None:
    answer = escaped(ConnectionRefusedError(), "test request", lambda exc: isinstance(exc, OSError))
    assert isinstance(answer, DatabaseUnavailable)
    assert (answer.status, answer.code) == (503, "database_unavailable")
    assert error_headers(answer) == [(b"retry-after", b"2")]
    assert "database unavailable" in caplog.text


def test_any_other_escaped_failure_is_a_500_without_headers(caplog: pytest.LogCaptureFixture) -> None:
    answer = escaped(KeyError("x"), "test request", lambda exc: False)
    assert (answer.status, answer.code, answer.message) == (500, "internal_error", "internal error")
    assert error_headers(answer) == []
    assert "test request failed" in caplog.text


def test_a_429_asks_for_whole_seconds_rounded_up() -> None:
    assert error_headers(RateLimited("slow", retry_after=1.2)) == [(b"retry-after", b"2")]
    assert error_headers(RateLimited("slow", retry_after=0.0)) == [(b"retry-after", b"1")]
