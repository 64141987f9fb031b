from __future__ import annotations

import orjson
import pytest

from relay.adapters import error_body, error_type

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
