"""The inference plane as ``relay batch`` calls it: ``RELAY_URL`` with ``RELAY_API_KEY``, one-line errors.

Kept apart so the batch commands and their result converters (``relay.cli.batch_results``) share one
client and one way of naming a failed call.
"""

from __future__ import annotations

from typing import Any

import httpx

from relay.cli.support import fail
from relay.config import load_client_settings


def inference_client() -> httpx.Client:
    client = load_client_settings()
    if client.api_key is None:
        fail("RELAY_API_KEY is not set (a relay key or an inference token)")
    headers = {"Authorization": f"Bearer {client.api_key.get_secret_value()}"}
    return httpx.Client(base_url=client.url, headers=headers, timeout=300)


def inference_call(http: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        fail(f"cannot reach Relay at {http.base_url} (RELAY_URL): {exc}")
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        fail(f"{response.status_code}: {error_message(data) or response.text}")
    return data


def error_message(data: Any) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        message = data["error"].get("message")
        return str(message) if message is not None else None
    return None


def json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
