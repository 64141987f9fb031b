"""Fixtures shared by every test package: real databases, Redis and the fake upstream."""

pytest_plugins = [
    "tests.fixtures.databases",
    "tests.fixtures.relay_server",
    "tests.fixtures.fake_upstream",
    "tests.fixtures.parallel",
]
