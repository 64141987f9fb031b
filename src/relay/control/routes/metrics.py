"""``GET /metrics``: this replica's Prometheus registry in the text exposition format, outside the
OpenAPI document and without the admin bearer (scrapers do not carry it; the guard checks ``/api``).

What it deliberately does not know: which metrics exist (``relay.telemetry.metrics`` registers them).
"""

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from relay.control.routes.table import Route


def metrics_routes(registry: CollectorRegistry) -> list[Route]:
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [Route("GET", "/metrics", metrics, None, admin=False, options={"include_in_schema": False})]
