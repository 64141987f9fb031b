"""The inference-plane ASGI app (SPEC §7): probes and the credential-checked model list.

``/livez`` says the process serves HTTP; ``/healthz`` says it can reach its database, through a
callable the composition root hands in (the hot path never imports the store). Every response
carries ``X-Relay-Request-ID``; errors use the OpenAI shape on ``/v1/*`` and ``/openai/*``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from relay.auth import authenticate
from relay.catalog import Snapshot
from relay.domain.credentials import read_credential
from relay.errors import RelayError
from relay.routing import granted_models

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def openai_error(exc: RelayError, request_id: str) -> JSONResponse:
    body = {
        "error": {"type": _ERROR_TYPES.get(exc.status, "api_error"), "code": exc.code, "message": exc.message}
    }
    return JSONResponse(body, status_code=exc.status, headers={"X-Relay-Request-ID": request_id})


def build_inference_app(
    database_ok: Callable[[], Awaitable[bool]], snapshot: Callable[[], Snapshot]
) -> Starlette:
    async def livez(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"}, headers={"X-Relay-Request-ID": uuid.uuid4().hex})

    async def healthz(_request: Request) -> JSONResponse:
        headers = {"X-Relay-Request-ID": uuid.uuid4().hex}
        if await database_ok():
            return JSONResponse({"status": "ok", "database": "ok"}, headers=headers)
        return JSONResponse(
            {"status": "unavailable", "database": "unreachable"}, status_code=503, headers=headers
        )

    async def models(request: Request) -> JSONResponse:
        request_id = uuid.uuid4().hex
        snap = snapshot()
        try:
            credential = read_credential(
                request.headers.get("authorization"), request.headers.get("x-api-key")
            )
            principal = authenticate(credential, snap)
        except RelayError as exc:
            return openai_error(exc, request_id)
        data: list[dict[str, Any]] = [
            {"id": m.name, "object": "model", "created": 0, "owned_by": m.provider}
            for m in granted_models(principal.policy, snap)
        ]
        return JSONResponse({"object": "list", "data": data}, headers={"X-Relay-Request-ID": request_id})

    return Starlette(
        routes=[
            Route("/livez", livez),
            Route("/healthz", healthz),
            Route("/v1/models", models),
            Route("/openai/v1/models", models),
        ]
    )
