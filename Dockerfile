# Relay container image.
#
#   docker build -t relay:dev .
#   docker run --rm -p 8080:8080 -p 8081:8081 relay:dev          # embedded mode (SQLite), a try-out
#
# Stage 1 builds the package and its dependencies into a virtualenv; stage 2 copies
# only that venv onto a clean python:3.11-slim, so no build tooling, pip caches or
# sources end up in the final image. The build context is whitelisted by .dockerignore.
#
# Layer caching: the dependencies are installed from requirements/runtime.lock alone, before
# the sources are copied, so a change under src/ rebuilds only the last (small) layer.

FROM python:3.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/relay

WORKDIR /src

# 1. The runtime dependencies, exactly as pinned in requirements/runtime.lock: every version fixed and
#    every file checked against the hashes recorded there (--require-hashes), so a release replaced on
#    the registry after the lock was made fails the build instead of entering the image. The lock also
#    pins pip, setuptools and wheel, which build Relay below without an unchecked build environment.
#    `make lock` refreshes it from pyproject.toml. This layer changes only with the lock.
COPY requirements/runtime.lock /src/requirements/
RUN /opt/relay/bin/pip install --no-cache-dir --require-hashes --no-deps -r /src/requirements/runtime.lock

# 2. Relay itself, without touching the dependencies installed above.
COPY README.md /src/
COPY src/ /src/src/
RUN /opt/relay/bin/pip install --no-cache-dir --no-deps --no-build-isolation /src \
    && /opt/relay/bin/relay --help > /dev/null


FROM python:3.11-slim

LABEL org.opencontainers.image.title="relay" \
      org.opencontainers.image.description="Relay: a self-hosted LLM gateway with a gateway-run Batches API"

# Absolute paths for everything Relay writes, all under the non-root user's home:
#   /var/lib/relay/relay-data       embedded mode (SQLite, generated master key and admin token)
#   /var/lib/relay/batch-payloads   batch item request/response files (SPEC §10.7)
ENV PATH="/opt/relay/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RELAY_BIND=0.0.0.0 \
    RELAY_PORT=8080 \
    RELAY_CONTROL_PORT=8081 \
    RELAY_LOG_FORMAT=json \
    RELAY_BATCH_PAYLOAD_DIR=/var/lib/relay/batch-payloads

RUN groupadd --system --gid 10001 relay \
    && useradd --system --uid 10001 --gid relay --home-dir /var/lib/relay --no-create-home \
       --shell /usr/sbin/nologin relay \
    && mkdir -p /var/lib/relay/relay-data /var/lib/relay/batch-payloads \
    && chown -R 10001:10001 /var/lib/relay

COPY --from=builder /opt/relay /opt/relay

WORKDIR /var/lib/relay
USER 10001:10001

# 8080: inference plane (and /livez, /healthz); 8081: control plane (and /metrics).
EXPOSE 8080 8081

# python:3.11-slim has no curl: probe /livez with the standard library. Any error
# (connection refused, non-2xx, timeout) raises and exits 1 = unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('RELAY_PORT', '8080') + '/livez', timeout=4)"]

# On SIGTERM Relay stops claiming batch items and drains for RELAY_SHUTDOWN_GRACE_S
# (default 30 s): give `docker stop` / compose a longer timeout than that.
STOPSIGNAL SIGTERM

ENTRYPOINT ["relay"]
CMD ["serve"]
