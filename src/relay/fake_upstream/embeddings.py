"""OpenAI embeddings (``POST /v1/embeddings``): deterministic vectors, float or base64 encoded.

Each vector is derived from a SHAKE-128 hash of its input, so equal inputs give equal vectors across
runs. Components are multiples of 1/32768 in [-1, 1): exactly representable as float32, so the float and
base64 (little-endian float32, what the official SDK requests by default) encodings decode identically.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

import orjson

from .errors import BadRequest
from .token_counts import input_tokens

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 3072


def vector(item: str | list[int], dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The embedding of one input (a string or a pre-tokenized list of ints)."""
    data = item.encode() if isinstance(item, str) else orjson.dumps(item)
    raw = hashlib.shake_128(data).digest(2 * dimensions)
    return [(v - 32768) / 32768 for v in struct.unpack(f"<{dimensions}H", raw)]


def _items(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [value]
        if all(isinstance(v, str) or (isinstance(v, list) and v) for v in value):
            return list(value)
    raise BadRequest("'input' must be a string, a list of strings or a list of token arrays", "invalid_input")


def _dimensions(body: dict[str, Any]) -> int:
    value = body.get("dimensions")
    if value is None:
        return DEFAULT_DIMENSIONS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSIONS:
        raise BadRequest(f"'dimensions' must be an integer between 1 and {MAX_DIMENSIONS}")
    return value


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    items = _items(body.get("input"))
    dimensions = _dimensions(body)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(items):
        vec = vector(item, dimensions)
        encoded: list[float] | str = (
            base64.b64encode(struct.pack(f"<{dimensions}f", *vec)).decode() if as_base64 else vec
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = input_tokens("embeddings", body)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
