"""The live inference plane over HTTP: real ``relay serve`` processes, the real fake upstream.

``gateway`` here is package-scoped: one process per backend serves every module of this package, so a
new module costs no process start. Tests build their own hosts, keys, models and policies
(``Gateway.scenario``, random names) and never assume what another test left behind.
"""

from tests.fixtures.live import gateway_fixture

gateway = gateway_fixture("package")
