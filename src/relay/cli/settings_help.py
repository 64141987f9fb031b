"""The text of ``relay serve --help``: every ``RELAY_*`` setting with its default and one line on what
it does.

It exists so ``relay.config`` holds only what reads and validates the environment; the list itself comes
from :class:`relay.config.Settings`, so a setting missing from :data:`SETTING_HELP` is still listed, with
its default. It deliberately reads no environment and validates nothing.
"""

from __future__ import annotations

from relay.config import ENV_PREFIX, STANDARD_VARIABLES, Settings

# What each setting does, for ``relay serve --help`` (one line each). A setting missing here is still
# listed there, with its default: the list comes from ``Settings`` itself.
SETTING_HELP: dict[str, str] = {
    "port": "inference plane port",
    "control_port": "control plane port (off: no control plane)",
    "bind": "address both planes listen on (127.0.0.1: this machine only)",
    "instance_id": "this replica's name in logs, usage events and batch leases",
    "database_url": "sqlite:///path.db (one process) or postgresql://user@host:5432/db",
    "redis_url": "shared rate limits, breakers and key selection (unset: in process memory)",
    "redis_max_connections": "connections to Redis per replica; when all are busy, requests wait for one",
    "redis_timeout_s": "a Redis call slower than this counts as Redis not answering (then: fail open)",
    "migrate_on_boot": "run the schema migrations at start",
    "master_key": "base64 of 32 bytes; encrypts stored host keys (embedded: generated into the data dir)",
    "admin_token": "control plane bearer (embedded: generated into the data dir)",
    "log_level": "debug | info | warning | error",
    "log_format": "json | console",
    "max_request_bytes": "largest live request body",
    "control_max_request_bytes": "largest control-plane request body (login: 4 KiB)",
    "max_header_bytes": "longest request line plus headers (431 past it)",
    "max_headers": "most request headers (431 past it)",
    "header_timeout_s": "longest wait for a request's headers (408)",
    "body_read_timeout_s": "longest gap between request body bytes (408)",
    "keepalive_timeout_s": "how long an idle keep-alive connection stays open",
    "max_json_depth": "deepest JSON nesting accepted in any input (400 invalid_json)",
    "public_url": "external base URL; https makes the session cookie Secure",
    "upstream_timeout_s": "longest wait for an upstream answer",
    "cache_max_bytes": "response cache held in process memory when RELAY_REDIS_URL is unset "
    "(least recently used out first)",
    "cache_max_entry_bytes": "largest cached response (a larger one is answered but not kept)",
    "guardrail_stream_window": "characters an output guardrail holds back on a stream, so a match split "
    "across chunks is still seen whole (1 to 65536)",
    "batch_workers": "batch items this process runs at once (0: none)",
    "batch_max_items": "most items in one batch (1 to 1000000)",
    "batch_max_bytes": "largest batch submission body",
    "batch_item_timeout_s": "longest run of one batch item",
    "batch_rescue_after_s": "an item running this long on a silent replica is taken over",
    "batch_heartbeat_s": "how often a replica says it is alive",
    "batch_expiry_sweep_s": "how often every replica cancels the open items of batches past expires_at",
    "offload_poll_s": "how often every replica polls the provider batches it runs offloaded",
    "batch_finalize_poll_s": "how often every replica looks for OpenAI-API batches whose files to write",
    "batch_payload_dir": "where batch request and response bodies are kept (shared by replicas)",
    "batch_payload_group_readable": "payload directories 0750 and files 0640 instead of 0700/0600 "
    "(for a sidecar or backup job in Relay's group)",
    "files_sweep_s": "how often a replica removes expired Files API files",
    "batch_retention_days": "delete finished batches (items, bodies, output files) this many days after "
    "they finished (0: keep forever)",
    "usage_retention_days": "delete usage events and captured payloads older than this many days "
    "(0: keep forever)",
    "retention_sweep_s": "how often a replica runs the retention sweep (one replica at a time)",
    "shutdown_grace_s": "how long a stop lets running requests and batch items finish",
    "webhook_timeout_s": "longest webhook attempt (connect to response head); then it is retried",
    "webhook_concurrency": "webhook attempts this replica makes at once",
    "webhook_retry_scale": "multiplies the webhook retry schedule and its 24 h window (tests: e.g. 0.001)",
    "otel_endpoint": "OpenTelemetry collector base URL (spans go to <it>/v1/traces as OTLP/HTTP); "
    "unset: no traces",
    "otel_sample_ratio": "share of traces sampled, 0–1 (OTEL_TRACES_SAMPLER_ARG wins; a caller's traceparent "
    "decides for its own requests)",
    "otel_sampler_arg": "OpenTelemetry's standard sample ratio; when set, it wins over "
    "RELAY_OTEL_SAMPLE_RATIO",
    "otel_service_name": "service.name of Relay's spans",
    "otel_headers": "headers sent to the collector (k=v,k2=v2; shown masked)",
    "oidc_issuer": "single sign-on: the OpenID Provider's issuer URL (https unless loopback); unset: no SSO",
    "oidc_client_id": "single sign-on: Relay's client id at the provider (required with the issuer)",
    "oidc_client_secret": "single sign-on: Relay's client secret at the provider (shown masked)",
    "oidc_scopes": "single sign-on: scopes asked for (must include openid)",
    "oidc_groups_claim": "single sign-on: the ID token claim that lists the account's groups",
    "oidc_admin_groups": "single sign-on: groups whose members get the dashboard's admin view (a,b)",
    "oidc_project_groups": "single sign-on: group=project[:policy],… memberships set at each sign-in",
    "oidc_redirect_url": "single sign-on: the callback URL registered at the provider (default: the "
    "request's scheme and Host + /ui/sso/callback)",
    "data_dir": "embedded mode's directory (SQLite file, generated master key and admin token)",
}


def settings_help() -> str:
    """Every ``RELAY_*`` setting with its default and what it does, from :class:`Settings`."""
    lines = []
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "<hostname>-<pid>" if name == "instance_id" else "(computed)"
        elif field.default is None:
            default = "unset"
        else:
            value = field.default
            default = str(value).lower() if isinstance(value, bool) else str(value)
            if isinstance(value, tuple):
                default = ",".join(map(str, value)) or "empty"
        what = SETTING_HELP.get(name) or field.description or ""
        env_name = STANDARD_VARIABLES.get(name) or ENV_PREFIX + name.upper()
        lines.append(f"{env_name} (default {default})" + (f": {what}" if what else ""))
    return "\n".join(lines)
