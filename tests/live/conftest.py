"""The live inference plane over HTTP: real ``relay serve`` processes, the real fake upstream."""

from tests.fixtures.live import gateway, live_reaper, replicas  # noqa: F401
