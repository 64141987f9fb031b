"""Guardrails over HTTP (SPEC §20): real ``relay serve`` processes on SQLite and on Postgres + Redis, the
real fake upstream (it echoes the last user message, so a prompt decides what the answer holds), a
real webhook server over loopback, the official SDKs.

``gateway`` is package-scoped: one process per backend for every module here. Each test makes its own
scenario and guardrails (random names).
"""

from collections.abc import Iterator

import pytest

from tests.fixtures.live import gateway_fixture
from tests.integration.guardrails.hook_server import HookServer

gateway = gateway_fixture("package")


@pytest.fixture(scope="package")
def hooks() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()
