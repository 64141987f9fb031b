"""Fixtures shared by every test package: real databases, Redis and the fake upstream."""

pytest_plugins = ["tests.fixtures.databases"]
