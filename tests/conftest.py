"""Fixtures shared by every test package, registered once here: real databases, Redis, the fake
upstream, relay processes and the parallel grouping. A package conftest defines only what its own
package needs; it never imports a shared fixture (registering it twice)."""

pytest_plugins = [
    "tests.fixtures.databases",
    "tests.fixtures.relay_server",
    "tests.fixtures.fake_upstream",
    "tests.fixtures.live",
    "tests.fixtures.shared_state",
    "tests.fixtures.private_postgres",
    "tests.fixtures.private_redis",
    "tests.e2e.faults.fleet",
    "tests.integration.webhooks.receiver",
    "tests.fixtures.parallel",
]
