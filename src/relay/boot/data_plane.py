"""The data plane's ASGI app: live inference (``LiveHandler`` over the shared pipeline, its usage
recorded through the writer) with the batch APIs mounted beside it.

What it deliberately does not know: what a handler does; it only builds and connects. Invariant: the
pipeline is the same object the batch runner uses (ARCHITECTURE rule 5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.types import ASGIApp

from relay.boot.shared import Shared
from relay.inference.app import InferenceApp
from relay.inference.live import LiveHandler
from relay.inference.recording import LiveRecorder


def build_inference_app(
    shared: Shared, mounts: Mapping[str, ASGIApp], database_ok: Callable[[], Awaitable[bool]]
) -> ASGIApp:
    settings = shared.settings
    return InferenceApp(
        live=LiveHandler(
            snapshot=shared.snapshot,
            pipeline=shared.pipeline,
            recorder=LiveRecorder(shared.writer, shared.metrics),
            translate_max_tokens=settings.translate_default_max_tokens,
            max_json_depth=settings.max_json_depth,
            cache=shared.cache,
            tracer=shared.tracer,
            guardrails=shared.guardrails,
            guardrail_window=settings.guardrail_stream_window,
        ),
        snapshot=shared.snapshot,
        database_ok=database_ok,
        max_request_bytes=settings.max_request_bytes,
        metrics=shared.metrics,
        tracer=shared.tracer,
        mounts=dict(mounts),
    )
