"""The fault suite: three ``relay serve`` replicas on a private Postgres cluster and a private Redis."""

from tests.fixtures.live import live_reaper  # noqa: F401
from tests.fixtures.private_postgres import private_postgres  # noqa: F401
