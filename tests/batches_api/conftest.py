"""The batch API over HTTP: real ``relay serve`` processes, the real fake upstream (SPEC §10)."""

from tests.fixtures.live import gateway, live_reaper  # noqa: F401
