"""The response cache over HTTP (SPEC §19): real ``relay serve`` processes on SQLite (the in-process
store) and on Postgres + Redis (the Redis store), the real fake upstream, the official SDKs.

``gateway`` is package-scoped: one process per backend for every module here. Tests make their own
scenarios (host, model, policy, key: random names) and give the policy its cache block.
"""

from tests.fixtures.live import gateway_fixture

gateway = gateway_fixture("package")
