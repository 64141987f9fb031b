"""What a caller may write for a ``Guardrail`` (SPEC §20), validated once when the catalog is written.

Why a module of its own. The hot path never compiles a pattern or parses a URL: a guardrail that is
stored has patterns that compile, exactly one matcher, a known stage, action, PII type and fail mode,
and every refusal names the field (``regex``, ``pii``, ``webhook.fail`` …) so ``POST`` answers 422 and
``relay apply`` says which document line to fix.

What it deliberately does not know: how a matcher runs (``relay.request.guardrails``).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from relay.domain.ids import NAME_PATTERN

Stage = Literal["input", "output"]
Action = Literal["block", "redact"]
PiiType = Literal["email", "phone", "credit_card", "iban", "ipv4", "us_ssn"]
FailMode = Literal["open", "closed"]
#: The PII types a ``pii`` matcher may name, in the order the docs list them.
PII_TYPES: tuple[str, ...] = ("email", "phone", "credit_card", "iban", "ipv4", "us_ssn")
MATCHERS: tuple[str, ...] = ("regex", "pii", "webhook")
_HTTP_URL: TypeAdapter[AnyHttpUrl] = TypeAdapter(AnyHttpUrl)


class WebhookMatcher(BaseModel):
    """``webhook: {url, timeout_ms, fail}``: another service decides; ``fail`` says what a timeout,
    non-2xx or malformed answer means (``open`` allows, ``closed`` blocks)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    url: str = Field(max_length=2048)
    timeout_ms: int = Field(1000, ge=1, le=60_000)
    fail: FailMode

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            url = _HTTP_URL.validate_python(value)
        except ValidationError:
            raise ValueError("must be an http:// or https:// URL, e.g. https://guard.example.com/check")
        if url.fragment:
            raise ValueError("must not carry a fragment")
        return value


class GuardrailSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(pattern=NAME_PATTERN)
    stage: Stage
    action: Action = "block"  # ignored for a webhook matcher: its answer decides
    regex: list[str] | None = Field(None, min_length=1, max_length=50)
    pii: list[PiiType] | None = Field(None, min_length=1)
    webhook: WebhookMatcher | None = None
    message: str = Field("", max_length=500)

    @field_validator("regex")
    @classmethod
    def _patterns_compile(cls, value: list[str] | None) -> list[str] | None:
        for index, pattern in enumerate(value or ()):
            if not pattern or len(pattern) > 2000:
                raise ValueError(f"pattern {index} must be 1-2000 characters")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {index} does not compile: {exc}") from None
            if compiled.match(""):
                raise ValueError(f"pattern {index} matches the empty string")
        return value

    @field_validator("pii")
    @classmethod
    def _pii_unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("a PII type may appear only once")
        return value

    @model_validator(mode="after")
    def _one_matcher(self) -> GuardrailSpec:
        given = [m for m in MATCHERS if getattr(self, m) is not None]
        if len(given) != 1:
            # Named after the first matcher given (or "regex" when none): the field to fix.
            field = given[1] if len(given) > 1 else "regex"
            named = ", ".join(given) or "none"
            raise ValueError(f"{field}: give exactly one matcher of regex, pii or webhook (given: {named})")
        return self

    @property
    def matcher(self) -> str:
        return next(m for m in MATCHERS if getattr(self, m) is not None)
