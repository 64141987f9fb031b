"""Payload logging (SPEC §9): whether a live request's bodies are captured, and capturing them cheaply.

What it does. :func:`capture_enabled` answers "capture this request?" from the snapshot's settings and
the caller's policy and key; :class:`BodyCapture` keeps at most ``max_bytes`` of a body that arrives
whole or chunk by chunk (SSE), and flags truncation; :class:`PayloadRecord` is what the background
usage writer stores beside the request's usage event, in the same transaction.

What it deliberately does not know. Storage (``relay.usage.writer`` queues records, ``relay.store.usage``
writes them), HTTP, and batches: **batch items are never captured** (SPEC §9, §10.8: the results
endpoint is where a batch's responses live), so the batch runner never calls anything here.

Invariants. Capture is off unless the global switch ``settings["payload_logging"]["enabled"]`` is
true, and then only for requests whose policy or key opts in. A captured body is never longer than the
cap, and ``truncated`` is true exactly when bytes were left out. Nothing here logs a body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

SETTING_KEY: Final = "payload_logging"
"""The key of the ``settings`` row (and of ``Snapshot.settings``) that holds the switch and the cap."""
DEFAULT_MAX_BYTES: Final = 1024 * 1024
MIN_MAX_BYTES: Final = 1024
MAX_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_SETTING: Final[Mapping[str, Any]] = {"enabled": False, "max_bytes": DEFAULT_MAX_BYTES}


def current_setting(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The effective payload-logging setting: the stored one over the defaults. A malformed stored
    value (edited by hand) reads as the default rather than failing requests."""
    stored = settings.get(SETTING_KEY)
    out = dict(DEFAULT_SETTING)
    if isinstance(stored, Mapping):
        if type(stored.get("enabled")) is bool:
            out["enabled"] = stored["enabled"]
        cap = stored.get("max_bytes")
        if type(cap) is int and MIN_MAX_BYTES <= cap <= MAX_MAX_BYTES:
            out["max_bytes"] = cap
    return out


def capture_enabled(
    settings: Mapping[str, Any], policy_payload_logging: bool, key_payload_logging: bool
) -> bool:
    """True when this live request's bodies are to be captured: the global switch AND (policy OR key)."""
    if not (policy_payload_logging or key_payload_logging):
        return False  # the common case decides without looking at settings
    stored = settings.get(SETTING_KEY)
    return isinstance(stored, Mapping) and stored.get("enabled") is True


def max_bytes(settings: Mapping[str, Any]) -> int:
    """The per-body cap in bytes (default 1 MiB)."""
    return int(current_setting(settings)["max_bytes"])


class BodyCapture:
    """Up to ``limit`` bytes of a body, fed whole or chunk by chunk; ``truncated`` when more came.

    Costs one bytearray append per chunk while under the cap and nothing past it, so capturing a
    stream never buffers more than the cap and never delays a chunk.
    """

    __slots__ = ("_buffer", "_limit", "truncated")

    def __init__(self, limit: int) -> None:
        self._limit = max(0, limit)
        self._buffer = bytearray()
        self.truncated = False

    def add(self, chunk: bytes | bytearray | memoryview) -> None:
        room = self._limit - len(self._buffer)
        if len(chunk) <= room:
            self._buffer += chunk
            return
        if room > 0:
            self._buffer += chunk[:room]
        if len(chunk):
            self.truncated = True

    @property
    def body(self) -> bytes:
        return bytes(self._buffer)

    def __len__(self) -> int:
        return len(self._buffer)


@dataclass(slots=True)
class PayloadRecord:
    """A live request's captured bodies, stored beside its usage event (``payloads`` table)."""

    request_id: str
    ts: datetime
    request_body: bytes
    response_body: bytes
    request_truncated: bool = False
    response_truncated: bool = False

    @property
    def size(self) -> int:
        """Bytes held in memory while queued (what the writer's payload budget counts)."""
        return len(self.request_body) + len(self.response_body)

    def to_row(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "ts": self.ts,
            "request_body": self.request_body,
            "response_body": self.response_body,
            "request_truncated": self.request_truncated,
            "response_truncated": self.response_truncated,
        }
