"""The OpenAI error shape of the §14 routes (SPEC §14), one renderer for the Files and Batches APIs.

What it does. :func:`openai_error` renders a :class:`~relay.errors.RelayError` as OpenAI's error body:
a 400 raised as :class:`~relay.domain.openai_batches.BadParam` names its ``param``; 400s and 404s are
``invalid_request_error`` with Relay's ``code`` (``not_found``, ``idempotency_key_reused``, …); every
other status takes the live plane's OpenAI error body (``relay.adapters.error_body``), so a 401 or a
503 reads the same on ``/openai/v1/*`` as on ``/v1/chat/completions``.

What it deliberately does not know. HTTP: the route modules send what it returns.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.adapters import OPENAI, error_body
from relay.domain.openai_batches import BadParam
from relay.errors import RelayError


def openai_error(exc: RelayError) -> dict[str, Any]:
    if isinstance(exc, BadParam):
        return {
            "error": {
                "type": "invalid_request_error",
                "code": exc.code,
                "message": exc.message,
                "param": exc.param,
            }
        }
    if exc.status in (400, 404):
        return {"error": {"type": "invalid_request_error", "code": exc.code, "message": exc.message}}
    return dict(orjson.loads(error_body(OPENAI, status=exc.status, code=exc.code, message=exc.message)))
