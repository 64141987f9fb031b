"""Server-sent event framing and provider-style ids.

Events are serialized once into bytes so the ASGI layer can hand each one to uvicorn as its own body
message (one flush per event, like a real provider streaming tokens).
"""

from __future__ import annotations

import os
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
"""OpenAI Chat Completions' end-of-stream sentinel."""


def data_event(payload: Any) -> bytes:
    """An unnamed event (OpenAI Chat Completions style)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def named_event(name: str, payload: Any) -> bytes:
    """An ``event:``/``data:`` pair (Anthropic Messages and OpenAI Responses style)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def new_id(prefix: str, nbytes: int = 12) -> str:
    """Random ids shaped like the provider's (``chatcmpl-…``, ``resp_…``, ``msg_…``); unique per call."""
    return prefix + os.urandom(nbytes).hex()
