"""What a caller may write for each catalog kind (SPEC §2), as strict pydantic models.

One model per kind describes a full object as written by ``POST`` or ``relay apply``. ``PATCH`` is not
a second model: the services overlay the patch on the current object and validate the result with the
same model, so a patch can never produce an object a create would refuse. Unknown fields are refused
(a typo must not be silently ignored), and every message names the field. References to other
objects are plain strings (name or id); resolving them needs the database and happens in the control
services.

Write-only fields (``User.password``, ``HostKey.value``, ``Webhook.secret``) are accepted here and
never rendered back.
"""

from __future__ import annotations

import base64
import binascii
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

from relay.domain.batch_offload import BatchOffload
from relay.domain.batch_policy import BatchPolicy
from relay.domain.breaker import DEFAULT_MAX_OPEN_S, MAX_OPEN_S, MAX_THRESHOLD, MAX_WINDOW_S
from relay.domain.cache_policy import CachePolicy
from relay.domain.grants import parse_grant
from relay.domain.ids import NAME_PATTERN
from relay.domain.ratelimits import RateLimit

Adapter = Literal["openai", "anthropic", "openai_responses"]
KeySelection = Literal["prioritized", "round_robin", "least_recently_used"]
Ref = str
_HTTP_URL: TypeAdapter[AnyHttpUrl] = TypeAdapter(AnyHttpUrl)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Named(_Strict):
    name: str = Field(pattern=NAME_PATTERN)


class TeamSpec(_Named):
    display_name: str = Field("", max_length=200)


class ProjectSpec(_Named):
    team: Ref
    default_policy: Ref | None = None
    enabled: bool = True


class ServiceAccountSpec(_Named):
    project: Ref
    policy: Ref | None = None
    enabled: bool = True


class Membership(_Strict):
    project: Ref
    policy: Ref | None = None


class UserSpec(_Named):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=320)
    password: str | None = Field(None, min_length=8, max_length=1024)
    enabled: bool = True
    memberships: list[Membership] = Field(default_factory=list)

    @field_validator("memberships")
    @classmethod
    def _one_membership_per_project(cls, value: list[Membership]) -> list[Membership]:
        seen = set()
        for m in value:
            if m.project in seen:
                raise ValueError(f"project {m.project!r} is listed twice")
            seen.add(m.project)
        return value


class BreakerSpec(_Strict):
    """A host's breaker tuning (SPEC §6); every field optional, its default the untuned breaker's."""

    threshold: int = Field(1, ge=1, le=MAX_THRESHOLD)
    window_s: float = Field(10.0, gt=0, le=MAX_WINDOW_S)
    max_open_s: float = Field(float(DEFAULT_MAX_OPEN_S), ge=1, le=MAX_OPEN_S)


class HostSpec(_Named):
    base_url: str = Field(max_length=2048)
    # None: the untuned breaker (the first 5xx or connection error opens a key, for 1, 2, 4 … 60 s).
    breaker: BreakerSpec | None = None
    enabled: bool = True

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            url = _HTTP_URL.validate_python(value)
        except ValidationError:
            raise ValueError("must be an http:// or https:// URL, e.g. https://api.openai.com")
        if url.query or url.fragment:
            raise ValueError("must not carry a query or fragment")
        return value.rstrip("/")


class HostKeySpec(_Named):
    host: Ref
    value: str | None = Field(None, min_length=1, max_length=4096)
    value_from_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
    enabled: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> HostKeySpec:
        if self.value is not None and self.value_from_env is not None:
            raise ValueError("value: give either value or value_from_env, not both")
        return self


class ModelSpec(_Named):
    provider: str = Field(pattern=NAME_PATTERN)
    aliases: list[str] = Field(default_factory=list)
    enabled: bool = True

    @field_validator("aliases")
    @classmethod
    def _aliases(cls, value: list[str]) -> list[str]:
        for alias in value:
            if not alias or len(alias) > 200 or any(c.isspace() for c in alias) or "@" in alias:
                raise ValueError(f"alias {alias!r} must be 1-200 characters without spaces or '@'")
        if len(set(value)) != len(value):
            raise ValueError("aliases must be unique")
        return value


class Pricing(_Strict):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)


class CatalogPricing(_Strict):
    """Prices taken from Relay's price catalog entry ``from_catalog`` (``relay.pricing.catalog``)."""

    from_catalog: str = Field(min_length=1, max_length=200)


#: ``pricing: from_catalog`` — the catalog entry named like the binding's upstream name, else its model.
FROM_CATALOG = "from_catalog"


class BindingSpec(_Named):
    model: Ref
    host: Ref
    adapter: Adapter
    upstream_name: str | None = Field(None, min_length=1, max_length=200)
    # Typed prices, or a reference into the price catalog resolved (copied) when the binding is written.
    pricing: Pricing | CatalogPricing | Literal["from_catalog"] | None = None
    # SPEC §22: whether batches routed wholly here may run on the provider's batch API; null = never.
    batch_offload: BatchOffload | None = Field(
        default=None,
        description="Provider batch offload (mode never|native, min_items ≥ 1, discount 0.0–1.0 "
        "= the share of the pricing charged); absent or null = never",
    )
    enabled: bool = True


class PolicySpec(_Named):
    models: list[str] = Field(default_factory=list)
    host_keys: list[Ref] = Field(default_factory=list)
    key_selection: KeySelection = "prioritized"
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    # SPEC §4 step 5: model (name or alias) → the models to try, in order, when it cannot answer.
    fallbacks: dict[str, list[str]] = Field(default_factory=dict)
    payload_logging: bool = False
    enabled: bool = True
    # SPEC §17: how the policy's batch items meet its limits; absent or null = the defaults (§10.4).
    batch: BatchPolicy = Field(
        default_factory=BatchPolicy,
        description="How batch items meet the policy's limits (pacing fail|wait, live_reserve "
        "0.0–0.9, max_concurrency ≥ 1 or null, translate); absent or null = the defaults",
    )

    # The response cache; absent or null = off.
    cache: CachePolicy | None = Field(
        default=None,
        description="The response cache (ttl <n>s|m|h|d up to 30d, scope project|policy|credential, "
        "streams true|false); absent or null = off",
    )

    # SPEC §20: the guardrails (name or id) every request under the policy passes, in order.
    guardrails: list[Ref] = Field(default_factory=list)

    @field_validator("guardrails")
    @classmethod
    def _guardrails_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a guardrail may appear only once")
        return value

    @field_validator("batch", mode="before")
    @classmethod
    def _batch_null_is_default(cls, value: object) -> object:
        # ``batch: null`` (a PATCH resetting the block, or an empty YAML key) means the defaults.
        return {} if value is None else value

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        # Model names and aliases are checked against the catalog by the control service (it needs
        # the database); the shape of the map is checked here.
        for model, chain in value.items():
            for name in (model, *chain):
                if not name or len(name) > 200 or "@" in name or any(c.isspace() for c in name):
                    raise ValueError(f"{model!r}: {name!r} must name a model (name or alias, no '@host')")
            if model in chain:
                raise ValueError(f"{model!r}: a model cannot fall back to itself")
            if len(set(chain)) != len(chain):
                raise ValueError(f"{model!r}: a fallback may appear only once in the list")
            if len(chain) > 10:
                raise ValueError(f"{model!r}: at most 10 fallbacks per model")
        return value

    @field_validator("models")
    @classmethod
    def _grants(cls, value: list[str]) -> list[str]:
        for grant in value:
            parse_grant(grant)
        return value

    @field_validator("host_keys")
    @classmethod
    def _pool_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a host key may appear only once in the pool")
        return value


#: The events a webhook may subscribe to (SPEC §10.10), in the order ``events`` defaults to.
WEBHOOK_EVENTS: tuple[str, ...] = ("batch.completed", "batch.cancelled", "batch.expired", "batch.failed")
WebhookEvent = Literal["batch.completed", "batch.cancelled", "batch.expired", "batch.failed"]
#: A generated secret: this prefix + base64 of 32 random bytes (the Standard Webhooks form).
WEBHOOK_SECRET_PREFIX = "whsec_"


class WebhookSpec(_Named):
    """A completion webhook (SPEC §10.10). ``secret`` is write-only: given, or generated at create."""

    project: Ref | None = None  # none: batches of every project
    url: str = Field(max_length=2048)
    secret: str | None = Field(None, min_length=1, max_length=1024)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(WEBHOOK_EVENTS))  # type: ignore[arg-type]
    enabled: bool = True

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            url = _HTTP_URL.validate_python(value)
        except ValidationError:
            raise ValueError("must be an http:// or https:// URL, e.g. https://hooks.example.com/relay")
        if url.username or url.password:
            raise ValueError("must not carry a user or password (the signature authenticates Relay)")
        if url.fragment:
            raise ValueError("must not carry a fragment")
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and value.startswith(WEBHOOK_SECRET_PREFIX):
            try:
                key = base64.b64decode(value[len(WEBHOOK_SECRET_PREFIX) :], validate=True)
            except (ValueError, binascii.Error):
                raise ValueError("a secret starting whsec_ must continue with base64") from None
            if len(key) < 16:
                raise ValueError("a whsec_ secret must hold at least 16 bytes")
        elif value is not None and len(value) < 16:
            raise ValueError("must be at least 16 characters (omit it to have one generated)")
        return value

    @field_validator("events")
    @classmethod
    def _events(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one event (omit the field for all of them)")
        if len(set(value)) != len(value):
            raise ValueError("an event may appear only once")
        return value
