"""A webhook's signing secret when its creator gave none (SPEC §10.10): generated, written sealed like a
given one, and handed back once, in the create answer.

It exists so the catalog service's single create and ``relay apply``'s all-or-nothing one generate
the secret the same way. It deliberately does not seal or store it (the catalog service does).
"""

from __future__ import annotations

import base64
import os

from pydantic import BaseModel

from relay.control.kinds import Kind
from relay.domain.kind_specs import WEBHOOK_SECRET_PREFIX


def new_webhook_secret() -> str:
    """SPEC §10.10: ``whsec_`` + base64 of 32 random bytes (the Standard Webhooks form)."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()


def with_generated_secret(kind: Kind, spec: BaseModel) -> tuple[BaseModel, str | None]:
    """A webhook created without a ``secret`` gets a generated one: the spec to write, and the secret
    to hand back ONCE in the create answer (None when nothing was generated)."""
    if kind.name != "Webhook" or getattr(spec, "secret", None) is not None:
        return spec, None
    secret = new_webhook_secret()
    return spec.model_copy(update={"secret": secret}), secret
