"""Standard Webhooks signing (SPEC §10.10): the HMAC key of a secret, the signature, the headers.

What it does. ``webhook-signature`` is ``v1,`` + base64 of HMAC-SHA256 over ``"<id>.<timestamp>.<body>"``;
the key of a secret that starts ``whsec_`` is the base64-decoded rest, of any other secret its UTF-8
bytes. Pure functions: no I/O, no clock (the caller passes the timestamp).

Invariants. The headers carry the event id, the timestamp and the signature, never the secret; the same
event id goes on every attempt, so a receiver dedupes by ``webhook-id``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from relay.domain.kind_specs import WEBHOOK_SECRET_PREFIX

USER_AGENT = "Relay-Webhooks/1"


def signing_key(secret: str) -> bytes:
    if secret.startswith(WEBHOOK_SECRET_PREFIX):
        return base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX) :])
    return secret.encode()


def signature(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{event_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, event_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Everything the POST carries besides its body."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, event_id, timestamp, body),
    }
