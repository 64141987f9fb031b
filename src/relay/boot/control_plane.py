"""The control plane's ASGI app: the admin API, its routes and the dashboard, behind ``ControlGuard``.

What it deliberately does not know: what a route does (``relay.control``); it only builds the
services the routes call and mounts them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from relay.batch_apis.files_service import FileService
from relay.batches.deleter import BatchDeleter
from relay.batches.service import BatchService
from relay.boot.shared import Shared
from relay.config import Settings
from relay.control.app import build_control_app
from relay.control.audit.queries import AuditQueries
from relay.control.dashboard import Dashboard, mount_dashboard
from relay.control.guard import ControlGuard
from relay.control.routes.audit import mount_audit_routes
from relay.control.routes.batches import mount_batch_routes
from relay.control.routes.credentials import mount_credential_routes
from relay.control.routes.policy_cache import mount_policy_cache_routes
from relay.control.routes.spend import mount_spend_routes
from relay.control.routes.usage import mount_usage_routes
from relay.control.routes.webhooks import mount_webhook_routes
from relay.control.services.apply import ApplyService
from relay.control.services.batches import BatchAdmin
from relay.control.services.health import HealthService
from relay.control.services.keys import KeyService
from relay.control.services.spend import spend_reader
from relay.control.services.sso_accounts import SsoAccounts
from relay.control.services.throttle import LoginThrottle
from relay.control.services.usage import CapturedPayloads, UsageQueries
from relay.control.services.webhooks import WebhookDeliveries
from relay.control.sso import OidcClient, SsoSettings


def build_control_plane(
    shared: Shared,
    keys: KeyService,
    applier: ApplyService,
    batches: BatchService,
    files: FileService,
    *,
    deleter: BatchDeleter,
) -> ASGIApp:
    settings, secrets, engine = shared.settings, shared.secrets, shared.engine
    admin_batches = BatchAdmin(engine, batches, deleter, shared.catalog.audit)
    webhook_deliveries = WebhookDeliveries(shared.catalog, engine)
    # One for POST /api/auth/login and the dashboard's sign-in; counted across replicas with Redis.
    login_throttle = LoginThrottle(shared.state if settings.redis_url else None)
    secure_cookies = (settings.public_url or "").startswith("https://")
    usage = UsageQueries(engine)
    audit = AuditQueries(engine)
    spend = spend_reader(shared.limiter, shared.snapshot)
    dashboard = Dashboard(
        admin_token=secrets.admin_token,
        catalog=shared.catalog,
        keys=keys,
        tokens=shared.tokens,
        batches=admin_batches,
        batch_service=batches,
        usage=usage,
        health=HealthService(shared.snapshot, shared.state),
        secure_cookies=secure_cookies,
        login_throttle=login_throttle,
        spend=spend,
        webhooks=webhook_deliveries,
        files=files,
        audit=audit,
        sso=sso_client(settings),
        sso_accounts=SsoAccounts(engine, shared.catalog),
    )

    def control_routes(app: FastAPI, admin: Any) -> None:
        mount_credential_routes(
            app, keys, shared.tokens, admin, secure_cookies=secure_cookies, throttle=login_throttle
        )
        mount_usage_routes(
            app, usage, CapturedPayloads(engine, shared.reloader.reload, shared.catalog.audit), admin
        )
        mount_spend_routes(app, spend, admin)
        mount_policy_cache_routes(app, shared.cache, shared.snapshot, shared.catalog.audit, admin)
        mount_batch_routes(app, admin_batches, admin)
        mount_webhook_routes(app, webhook_deliveries, admin)
        mount_audit_routes(app, audit, admin)
        mount_dashboard(app, dashboard)

    control = build_control_app(
        admin_token=secrets.admin_token,
        catalog=shared.catalog,
        applier=applier,
        reloader=shared.reloader,
        registry=shared.registry,
        extra_routes=control_routes,
    )
    guarded = ControlGuard(
        control,
        admin_token=secrets.admin_token,
        max_bytes=settings.control_max_request_bytes,
        max_json_depth=settings.max_json_depth,
        inference_port=settings.port,
    )
    # SPEC §18: a server span per write (reads and the dashboard's pages are not traced).
    return guarded if shared.tracer is None else shared.tracer.asgi(guarded, writes_only=True)


def sso_client(settings: Settings) -> OidcClient | None:
    """The OIDC client when ``RELAY_OIDC_ISSUER`` is set (SPEC §21); it contacts the provider only at
    sign-in, so an unreachable provider never stops the start."""
    if settings.oidc_issuer is None or settings.oidc_client_id is None:
        return None
    secret = settings.oidc_client_secret
    return OidcClient(
        SsoSettings(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            client_secret=secret.get_secret_value() if secret is not None else None,
            scopes=settings.oidc_scopes,
            groups_claim=settings.oidc_groups_claim,
            admin_groups=settings.oidc_admin_groups,
            project_groups=settings.oidc_project_groups,
            redirect_url=settings.oidc_redirect_url,
        )
    )
