"""Control and introspection endpoints (``/__config``, ``/__stats``, ``/__requests``, ``/__reset``).

They live under ``/__`` so they can never collide with a provider path, and they are not recorded or
delayed, so tests can inspect the fake without disturbing what they measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import orjson

from .asgi import Receive, Scope, Send, read_body, send_json
from .config import ConfigError

if TYPE_CHECKING:
    from .app import FakeUpstreamApp

DEFAULT_REQUESTS_LIMIT = 100


def _limit(scope: Scope) -> int:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("limit")
    if not values:
        return DEFAULT_REQUESTS_LIMIT
    try:
        return max(0, int(values[-1]))
    except ValueError:
        return DEFAULT_REQUESTS_LIMIT


async def handle(app: FakeUpstreamApp, scope: Scope, receive: Receive, send: Send) -> None:
    path, method = scope["path"], scope["method"]
    if path == "/health" and method == "GET":
        await send_json(send, 200, {"status": "ok"})
    elif path == "/__config" and method == "GET":
        await send_json(send, 200, app.config.to_dict())
    elif path == "/__config" and method == "POST":
        try:
            app.config = app.config.updated(orjson.loads(await read_body(receive)))
        except orjson.JSONDecodeError:
            await send_json(send, 400, {"error": "body must be JSON"})
            return
        except ConfigError as exc:
            await send_json(send, 400, {"error": str(exc)})
            return
        await send_json(send, 200, app.config.to_dict())
    elif path == "/__stats" and method == "GET":
        await send_json(send, 200, app.recorder.snapshot())
    elif path == "/__requests" and method == "GET":
        await send_json(send, 200, {"requests": app.recorder.recent(_limit(scope))})
    elif path == "/__reset" and method == "POST":
        app.recorder.reset()
        app.native.reset()
        app.config = app.initial.copy()
        await send_json(send, 200, app.config.to_dict())
    else:
        await send_json(send, 404, {"error": f"no admin endpoint {method} {path}"})
