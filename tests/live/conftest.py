"""The live inference plane over HTTP: real ``relay serve`` processes, the real fake upstream.

``gateway`` here is package-scoped (``package_gateway``): one process per backend serves every module of
``tests/live``, so a new module costs no process start. Tests build their own hosts, keys, models and
policies (``Gateway.scenario``, random names) and never assume what another test left behind.
"""

from tests.fixtures.live import live_reaper, package_gateway, replicas  # noqa: F401
