"""Test helpers: the credentials the fake upstream's tests send, and the strict SSE parser
(``tests.fixtures.sse``), so stream tests see exactly the events on the wire."""

from __future__ import annotations

from tests.fixtures.sse import parse_sse

__all__ = ["ANTHROPIC_AUTH", "OPENAI_AUTH", "parse_sse"]

OPENAI_AUTH = {"authorization": "Bearer sk-test"}
ANTHROPIC_AUTH = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
