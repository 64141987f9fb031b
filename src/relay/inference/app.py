"""The inference-plane ASGI app (SPEC §7). For now: the probes every deployment needs.

``/livez`` says the process serves HTTP; ``/healthz`` says it can reach its database, through a
callable the composition root hands in (the hot path never imports the store).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def build_inference_app(database_ok: Callable[[], Awaitable[bool]]) -> Starlette:
    async def livez(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def healthz(_request: Request) -> JSONResponse:
        if await database_ok():
            return JSONResponse({"status": "ok", "database": "ok"})
        return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)

    return Starlette(routes=[Route("/livez", livez), Route("/healthz", healthz)])
