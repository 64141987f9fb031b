"""Relay's settings: the only module that reads ``os.environ``.

Every ``RELAY_*`` variable of SPEC §1 and §10.6 is declared here once, parsed and validated at start,
and frozen. A bad value becomes a :class:`ConfigError` whose message names the variable in one line, so
``relay serve`` can print it and exit without a traceback.

It deliberately does not create files or generate secrets: embedded-mode defaults that need the disk
(``relay-data/master.key``, ``relay-data/admin.token``) are provisioned by ``relay.crypto.sealing`` at boot.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import socket
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from relay.oidc_settings import (
    GroupGrant,
    check_issuer,
    check_redirect,
    check_scopes,
    parse_groups,
    parse_project_groups,
)

ENV_PREFIX = "RELAY_"
DEFAULT_DATA_DIR = "relay-data"
DEFAULT_SQLITE_URL = f"sqlite:///{DEFAULT_DATA_DIR}/relay.db"
_POSTGRES_ALIAS = re.compile(r"^postgres(?=[+:])", re.IGNORECASE)


class ConfigError(ValueError):
    """A setting has a bad value; the message is one line naming the variable."""


def _port_or_off(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    return value


def _whole_number(value: object) -> object:
    """A count of days as the environment spells it: digits only (no sign, fraction or exponent)."""
    if isinstance(value, str):
        if not value.strip().isdigit() or not value.strip().isascii():
            raise ValueError(f"must be a whole number of days (0 = keep forever), got {value!r}")
        return int(value.strip())
    return value


PortOrOff = Annotated[Annotated[int, Field(ge=1, le=65535)] | None, BeforeValidator(_port_or_off)]


class Settings(BaseModel):
    """Effective configuration. Frozen: objects receive it from ``boot`` and never mutate it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(8080, ge=1, le=65535)
    control_port: PortOrOff = 8081
    bind: str = "0.0.0.0"
    instance_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}", min_length=1)
    database_url: str = DEFAULT_SQLITE_URL
    redis_url: str | None = None
    redis_max_connections: int = Field(100, ge=1, le=100_000)
    redis_timeout_s: float = Field(2.0, gt=0, le=60)
    migrate_on_boot: bool = True
    master_key: SecretStr | None = None
    admin_token: SecretStr | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "console"
    max_request_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    control_max_request_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_headers: int = Field(100, ge=8, le=10_000)
    header_timeout_s: float = Field(10.0, gt=0)
    body_read_timeout_s: float = Field(30.0, gt=0)
    keepalive_timeout_s: float = Field(5.0, gt=0)
    # Capped at 250: whatever is admitted must still be writable by orjson (254 levels).
    max_json_depth: int = Field(128, ge=2, le=250)
    public_url: str | None = None  # where users reach Relay; https makes the session cookies Secure
    upstream_timeout_s: float = Field(300.0, gt=0)
    translate_default_max_tokens: int = Field(4096, ge=1)
    cache_max_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=1 << 40)
    cache_max_entry_bytes: int = Field(1024 * 1024, ge=1, le=1 << 30)
    guardrail_stream_window: int = Field(256, ge=1, le=65_536)
    batch_workers: int = Field(16, ge=0, le=4096)
    # Up to a million (SPEC §17 "Scale"): submit, status and results stay bounded in memory and time.
    batch_max_items: int = Field(50_000, ge=1, le=1_000_000)
    batch_max_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    batch_item_timeout_s: float = Field(300.0, gt=0)
    batch_rescue_after_s: float = Field(900.0, gt=0)
    batch_heartbeat_s: float = Field(5.0, gt=0, le=60)
    batch_expiry_sweep_s: float = Field(30.0, gt=0, le=3600)
    offload_poll_s: float = Field(30.0, ge=0.05, le=3600, allow_inf_nan=False)  # SPEC §22
    batch_finalize_poll_s: float = Field(1.0, gt=0, le=3600)
    batch_payload_dir: str = "relay-batch-payloads"
    batch_payload_store: Literal["files", "database"] = "files"
    batch_payload_group_readable: bool = False
    files_sweep_s: float = Field(60.0, gt=0, le=3600)
    # SPEC §17 retention: 0 keeps everything (§10.7's default); whole days only, so "1.5" is refused.
    batch_retention_days: Annotated[int, Field(ge=0, le=36_500), BeforeValidator(_whole_number)] = 0
    usage_retention_days: Annotated[int, Field(ge=0, le=36_500), BeforeValidator(_whole_number)] = 0
    retention_sweep_s: float = Field(3600.0, gt=0, le=30 * 86400, allow_inf_nan=False)
    shutdown_grace_s: float = Field(30.0, ge=0)
    webhook_timeout_s: float = Field(10.0, gt=0, le=60)
    webhook_concurrency: int = Field(8, ge=1, le=1024)
    webhook_retry_scale: float = Field(1.0, gt=0, le=1)
    data_dir: str = DEFAULT_DATA_DIR
    # SPEC §18 traces: off while the endpoint is unset. The last three are the standard OpenTelemetry
    # variables (STANDARD_VARIABLES names them), read here so a bad value stops the start like any other.
    otel_endpoint: str | None = None
    otel_sample_ratio: float = Field(1.0, ge=0, le=1, allow_inf_nan=False)
    otel_sampler_arg: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    otel_service_name: str = Field("relay", min_length=1)
    otel_headers: SecretStr | None = None
    # SPEC §21 single sign-on: off while the issuer is unset; discovery happens at sign-in, not here.
    oidc_issuer: Annotated[str, AfterValidator(check_issuer)] | None = None
    oidc_client_id: str | None = Field(None, min_length=1, max_length=512)
    oidc_client_secret: SecretStr | None = None
    oidc_scopes: Annotated[str, AfterValidator(check_scopes)] = "openid email profile"
    oidc_groups_claim: str = Field("groups", min_length=1, max_length=256)
    oidc_admin_groups: Annotated[tuple[str, ...], BeforeValidator(parse_groups)] = ()
    oidc_project_groups: Annotated[tuple[GroupGrant, ...], BeforeValidator(parse_project_groups)] = ()
    oidc_redirect_url: Annotated[str, AfterValidator(check_redirect)] | None = None

    @field_validator("log_level", "log_format", "batch_payload_store", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator(
        "redis_url",
        "public_url",
        "otel_endpoint",
        "otel_sampler_arg",
        "otel_headers",
        "oidc_issuer",
        "oidc_client_id",
        "oidc_client_secret",
        "oidc_redirect_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value is not None else None

    @field_validator("otel_endpoint")
    @classmethod
    def _otel_endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/?#\s]+(/[^?#\s]*)?$", value):
            raise ValueError(
                "must be the collector's http:// or https:// base URL (e.g. http://collector:4318)"
            )
        return value.rstrip("/")

    @property
    def otel_ratio(self) -> float:
        """The trace sample ratio in force: ``OTEL_TRACES_SAMPLER_ARG`` when set, else Relay's own."""
        return self.otel_sample_ratio if self.otel_sampler_arg is None else self.otel_sampler_arg

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        """``postgres://`` (what Heroku, Render, Supabase and most managed-Postgres consoles hand
        out; SQLAlchemy dropped that alias) is taken as ``postgresql://``: the rest of Relay sees
        one spelling."""
        value = _POSTGRES_ALIAS.sub("postgresql", value, count=1)
        try:
            url = make_url(value)
        except ArgumentError:
            raise ValueError("not a SQLAlchemy URL (sqlite:///path.db or postgresql://user@host/db)")
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {backend!r}: use sqlite:/// or postgresql://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("master_key")
    @classmethod
    def _master_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        try:
            raw = base64.b64decode(value.get_secret_value(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be base64 of 32 bytes (e.g. `openssl rand -base64 32`)")
        if len(raw) != 32:
            raise ValueError(f"must be base64 of 32 bytes, got {len(raw)} bytes")
        return value

    @field_validator("admin_token")
    @classmethod
    def _admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        if self.is_postgres and self.master_key is None:
            raise ValueError("RELAY_MASTER_KEY: required when RELAY_DATABASE_URL is Postgres")
        if self.batch_rescue_after_s <= self.batch_item_timeout_s:
            raise ValueError(
                "RELAY_BATCH_RESCUE_AFTER_S: must exceed RELAY_BATCH_ITEM_TIMEOUT_S "
                f"({self.batch_rescue_after_s:g} <= {self.batch_item_timeout_s:g})"
            )
        if self.control_port is not None and self.control_port == self.port:
            raise ValueError("RELAY_CONTROL_PORT: must differ from RELAY_PORT")
        if self.oidc_issuer is not None and self.oidc_client_id is None:
            raise ValueError("RELAY_OIDC_CLIENT_ID: required when RELAY_OIDC_ISSUER is set")
        return self

    @property
    def is_postgres(self) -> bool:
        return make_url(self.database_url).get_backend_name() == "postgresql"

    @property
    def is_embedded(self) -> bool:
        return not self.is_postgres

    def masked(self) -> dict[str, object]:
        """The effective configuration as ``RELAY_*`` names, secrets and URL passwords masked."""
        out: dict[str, object] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "********"
            elif name in ("database_url", "redis_url") and value:
                value = _mask_url_password(value)
            elif isinstance(value, tuple):  # a list setting, written back as the variable spells it
                value = ",".join(map(str, value))
            env_name = STANDARD_VARIABLES.get(name) or ENV_PREFIX + name.upper()
            out[env_name] = "off" if name == "control_port" and value is None else value
        return out


def _mask_url_password(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.password is None:
        return url
    return parsed.render_as_string(hide_password=True)


STANDARD_VARIABLES: Mapping[str, str] = {
    "otel_sampler_arg": "OTEL_TRACES_SAMPLER_ARG",
    "otel_service_name": "OTEL_SERVICE_NAME",
    "otel_headers": "OTEL_EXPORTER_OTLP_HEADERS",
}
"""Settings read from OpenTelemetry's standard variables rather than a ``RELAY_*`` one (SPEC §18)."""


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings once; raise :class:`ConfigError` naming the bad variable."""
    env = dict(os.environ if environ is None else environ)
    values = {k[len(ENV_PREFIX) :].lower(): v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    known = set(Settings.model_fields) - set(STANDARD_VARIABLES)
    values = {k: v for k, v in values.items() if k in known}
    for name, variable in STANDARD_VARIABLES.items():
        if env.get(variable):
            values[name] = env[variable]
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


CLIENT_VARIABLES = {"URL", "CONTROL_URL", "API_KEY"}


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """``RELAY_*`` names that no setting reads (typos such as ``RELAY_PROT``), for a boot warning."""
    env = os.environ if environ is None else environ
    known = {name.upper() for name in Settings.model_fields if name not in STANDARD_VARIABLES}
    known |= CLIENT_VARIABLES
    return sorted(
        k
        for k in env
        if k.startswith(ENV_PREFIX) and k[len(ENV_PREFIX) :] not in known and not k.startswith("RELAY_TEST_")
    )


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = err.get("loc") or ()
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if loc:
        field = str(loc[0])
        return f"{STANDARD_VARIABLES.get(field) or ENV_PREFIX + field.upper()}: {message}"
    return message


def host_key_env() -> Mapping[str, str]:
    """The process environment, for host keys stored as ``value_from_env`` (read at snapshot build)."""
    return os.environ


class ClientSettings(BaseModel):
    """What the CLI's client commands need: where Relay listens and which credential to present."""

    model_config = ConfigDict(frozen=True)

    url: str = "http://127.0.0.1:8080"
    control_url: str = "http://127.0.0.1:8081"
    api_key: SecretStr | None = None
    admin_token: SecretStr | None = None
    data_dir: str = DEFAULT_DATA_DIR


def load_client_settings(environ: Mapping[str, str] | None = None) -> ClientSettings:
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name in ("url", "control_url", "api_key", "admin_token", "data_dir"):
        raw = env.get(ENV_PREFIX + name.upper())
        if raw:
            values[name] = raw.rstrip("/") if name.endswith("url") else raw
    return ClientSettings.model_validate(values)
