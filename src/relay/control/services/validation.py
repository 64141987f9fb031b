"""The control plane's one body-validation rule: a request body as its pydantic model, or a 400 naming
the fields that are wrong (422 where the SPEC says so).

It exists so every service that takes a body (catalog objects, keys, tokens) refuses it in the same
words. It deliberately knows no kind, table or HTTP: it raises ``InvalidRequest``, which the control
API renders.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from relay.domain.guardrail_spec import GuardrailSpec
from relay.errors import InvalidRequest

_Spec = TypeVar("_Spec", bound=BaseModel)


def validation_message(exc: ValidationError) -> str:
    """``field.path: message`` for the first few problems, so the caller knows exactly what to fix."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


#: Fields whose invalid values answer 422 rather than the control plane's usual 400: the SPEC says
#: so for them (§19's ``cache`` block, §22's ``batch_offload``, and every field of a §20 guardrail); the
#: message names the field either way.
UNPROCESSABLE_FIELDS = frozenset(("cache", "batch_offload"))


def validated(model: type[_Spec], payload: Any) -> _Spec:
    """``payload`` as ``model``, or a 400 (422 for :data:`UNPROCESSABLE_FIELDS`) naming the fields
    that are wrong (the control plane's one body-validation rule)."""
    if not isinstance(payload, dict):
        raise InvalidRequest("body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0].get("loc", ()) if exc.errors() else ()
        if (first and first[0] in UNPROCESSABLE_FIELDS) or model is GuardrailSpec:
            raise InvalidRequest(validation_message(exc), status=422, code="unprocessable") from None
        raise InvalidRequest(validation_message(exc)) from None
