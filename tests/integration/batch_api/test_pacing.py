"""Pacing through ``relay serve`` (SPEC §17), on SQLite (memory state) and Postgres + Redis: a policy
whose batch block says ``pacing: wait`` with a live share runs a batch larger than its limits to the
end with no rate-limit failures, while a live client that stays within ``limit − share`` per window is
never refused; the upstream sees no more than the limit per window, nor batch items more than the share
(``tests.fixtures.windows``: a request admitted at a window's end may arrive in the next).
"""

from __future__ import annotations

import time

from tests.fixtures.live import Gateway
from tests.fixtures.windows import over_allowance
from tests.integration.batch_api.helpers import chat_item, results, submit, wait_finished

WINDOW_S = 2
LIMIT = 10
SHARE = 5  # floor(10 × (1 − 0.5))


def next_window() -> None:
    """Sleep to just after the next epoch-aligned window starts (the client keeps to a per-window
    budget; nothing is asserted on time)."""
    time.sleep(WINDOW_S - time.time() % WINDOW_S + 0.05)


def test_a_paced_batch_and_a_live_client_share_every_window(gateway: Gateway) -> None:
    rules = [{"meter": "requests", "limit": LIMIT, "window": f"{WINDOW_S}s"}]
    s = gateway.scenario(rules=rules)
    patched = gateway.patch("policies", s.policy, {"batch": {"pacing": "wait", "live_reserve": 0.5}})
    assert patched["batch"]["pacing"] == "wait"
    items = [chat_item(i, model=s.model) for i in range(12)]
    batch_id = submit(gateway, "openai", items, key=s.key)

    live_statuses = []
    for _ in range(3):  # three windows of live traffic at its whole share, the batch running beside it
        next_window()
        for _ in range(LIMIT - SHARE):
            live_statuses.append(gateway.chat(s.model, key=s.key).status_code)
    assert live_statuses == [200] * 3 * (LIMIT - SHARE)

    view = wait_finished(gateway, batch_id, key=s.key, timeout=60.0)
    assert view["counts"] == {"completed": 12}
    assert [r.get("error") for r in results(gateway, batch_id, key=s.key)] == [None] * 12

    key_value = s.value(0)
    sent = [r for r in gateway.fake.requests(limit=1000) if r["key"] == key_value]
    assert len(sent) == 12 + 3 * (LIMIT - SHARE)
    assert over_allowance([r["ts"] for r in sent], WINDOW_S, LIMIT) == []
    batch_sent = [r["ts"] for r in sent if "item " in str(r["body"])]
    assert len(batch_sent) == 12
    assert over_allowance(batch_sent, WINDOW_S, SHARE) == []
