"""What the providers' native batch APIs share in the fake: a batch's clock, its lines' outcomes, and
the in-memory store of batches and files (``openai_batches`` and ``anthropic_batches`` render them in
each provider's own objects).

Why a clock and not a worker: a batch's state is a pure function of the time since it was created,
the ``batch_phase_ms`` knob (each phase's length), ``batch_expire_ms`` (when an unfinished batch
expires) and when it was cancelled — so a poll at any moment sees what the provider would show, with
no background task, and a test picks its timeline with two knobs. Lines finish in order, spread
evenly over the ``in_progress`` phase; a batch cancelled or expired keeps the lines finished by then.

A line fails (HTTP 400, ``invalid_request_error``) when its request carries ``fake:batch_fail`` in any
text — a trigger in the request's own meaning, like the other scenario triggers
(``scenario``), so it survives Relay's translation of items. Otherwise the line is answered by the
same renderer as the live endpoint (``openai_chat``, ``responses``, ``embeddings``, ``anthropic``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from . import anthropic, embeddings, openai_chat, responses
from .errors import BadRequest

#: The text that makes a batch line fail with a 400.
FAIL_TRIGGER = b"fake:batch_fail"
FAIL_MESSAGE = "fake:batch_fail: this request was refused as the test asked."

Renderer = Callable[[dict[str, Any], str], dict[str, Any]]
#: The endpoints a batch line may call, with the live endpoint's renderer.
RENDERERS: dict[str, Renderer] = {
    "/v1/chat/completions": openai_chat.render,
    "/v1/responses": responses.render,
    "/v1/embeddings": embeddings.render,
    "/v1/messages": anthropic.render,
}

Ending = Literal["completed", "cancelled", "expired"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One line's answer: ``status`` 200 with the endpoint's ``body``, or an error status and body;
    ``status`` 0 for a line never run (its batch ended first: cancelled or expired)."""

    status: int
    body: dict[str, Any] | None


def run_line(endpoint: str, body: Any, raw: bytes) -> Outcome:
    """The answer the live endpoint would give this line's request (``raw``: its JSON, to look for the
    failure trigger without walking the body)."""
    if FAIL_TRIGGER in raw:
        return Outcome(400, {"error": {"type": "invalid_request_error", "message": FAIL_MESSAGE}})
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
        return Outcome(400, {"error": {"type": "invalid_request_error", "message": "model: Field required"}})
    try:
        return Outcome(200, RENDERERS[endpoint](body, body["model"]))
    except BadRequest as exc:
        return Outcome(400, {"error": {"type": "invalid_request_error", "message": exc.message}})


@dataclass(slots=True)
class NativeBatch:
    """A batch as either provider holds it. ``lines``: ``(custom_id, request body, its raw JSON)``."""

    id: str
    endpoint: str
    lines: list[tuple[str, Any, bytes]]
    created: float
    phase_s: float
    expire_s: float | None
    # OpenAI's extra phases (validating, finalizing); Anthropic's batches are only in_progress.
    phases: int = 3
    extra: dict[str, Any] = field(default_factory=dict)
    cancelled_at: float | None = None
    _outcomes: list[Outcome] | None = None

    def _progress_end(self) -> float:
        """When the last line finishes (relative to ``created``)."""
        return self.phase_s * (2 if self.phases == 3 else 1)

    def _natural_end(self) -> float:
        return self.phase_s * self.phases

    def ended(self, now: float) -> tuple[Ending, float] | None:
        """How and when (absolute time) the batch ended, or None while it runs."""
        candidates: list[tuple[float, Ending]] = [(self.created + self._natural_end(), "completed")]
        if self.expire_s is not None:
            candidates.append((self.created + self.expire_s, "expired"))
        if self.cancelled_at is not None:
            candidates.append((self.cancelled_at, "cancelled"))
        at, how = min(candidates, key=lambda c: c[0])
        return (how, at) if now >= at else None

    def done(self, at: float) -> int:
        """How many lines (the first ones) had finished at absolute time ``at``."""
        if self.cancelled_at is not None:
            at = min(at, self.cancelled_at)
        total = len(self.lines)
        start = self.phase_s if self.phases == 3 else 0.0
        span = self._progress_end() - start
        elapsed = at - self.created - start
        if span <= 0:
            return total if elapsed >= 0 else 0
        return max(0, min(total, math.floor(total * elapsed / span)))

    def phase(self, now: float) -> str:
        """``validating``, ``in_progress``, ``finalizing`` or, once ended, the ending."""
        ending = self.ended(now)
        if ending is not None:
            return ending[0]
        elapsed = now - self.created
        if self.phases == 3 and elapsed < self.phase_s:
            return "validating"
        if elapsed < self._progress_end():
            return "in_progress"
        return "finalizing"

    def outcomes(self, now: float) -> list[Outcome]:
        """Every line's outcome once the batch ended (computed once), in input order."""
        if self._outcomes is None:
            ending = self.ended(now)
            assert ending is not None, "a running batch has no results yet"
            finished = len(self.lines) if ending[0] == "completed" else self.done(ending[1])
            never = Outcome(0, None)
            self._outcomes = [
                run_line(self.endpoint, body, raw) if i < finished else never
                for i, (_, body, raw) in enumerate(self.lines)
            ]
        return self._outcomes


@dataclass(slots=True)
class StoredFile:
    """An OpenAI file: its object (``id``, ``bytes``, ``purpose``, …) and its content."""

    info: dict[str, Any]
    content: bytes


@dataclass(slots=True)
class NativeStore:
    """Every native batch and file the fake holds, by id; emptied by ``POST /__reset``."""

    batches: dict[str, NativeBatch] = field(default_factory=dict)
    files: dict[str, StoredFile] = field(default_factory=dict)

    def reset(self) -> None:
        self.batches.clear()
        self.files.clear()


def now() -> float:
    return time.time()


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)
