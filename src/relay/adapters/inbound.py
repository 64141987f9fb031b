"""First look at a caller's request body: parse it once, check the two fields Relay needs, nothing more.

What it knows: SPEC §7's rules for every inference route — the body is one JSON object
no deeper than ``RELAY_MAX_JSON_DEPTH`` and with no lone UTF-16 surrogate in any string
(else 400 ``invalid_json``) with a non-empty string ``model`` (else 400 ``missing_model``) — and how a
body asks for a stream (``"stream": true``).

What it deliberately does not know: the rest of each shape's schema. Same-shape requests pass through,
so the upstream validates its own fields and its 400 reaches the caller unchanged; re-validating here
would only add CPU and disagree with the provider over time. (The canonical shape, which Relay owns, is
validated by ``relay.adapters.canonical``.) Size limits (413) are the handler's, before parsing.

Invariants: the dict returned is the one orjson built — no copy; callers must not mutate it if they
also keep using it as "the caller's request" (``build_upstream_request`` never does).
"""

from __future__ import annotations

from typing import Any

from .base import AdapterError
from .json_codec import DEFAULT_MAX_DEPTH, JsonRefused, loads_input


def parse_request(body: bytes | bytearray | memoryview, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """The request as a dict; raises ``AdapterError`` (400): ``invalid_json`` (also for JSON deeper than
    ``max_depth`` or holding a lone surrogate, naming the depth or field) or ``missing_model``."""
    try:
        parsed = loads_input(body, max_depth, what="request body")
    except JsonRefused as exc:
        raise AdapterError("invalid_json", str(exc)) from None
    except ValueError:
        raise AdapterError("invalid_json", "request body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise AdapterError("invalid_json", "request body must be a JSON object")
    model = parsed.get("model")
    if not isinstance(model, str) or not model.strip():
        if model is None:
            raise AdapterError("missing_model", "request body has no 'model'")
        raise AdapterError("missing_model", "'model' must be a non-empty string")
    return parsed


def wants_stream(body: dict[str, Any]) -> bool:
    """True when the caller asked for a stream. Only JSON ``true`` counts, as for the providers."""
    return body.get("stream") is True
