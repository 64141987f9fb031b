"""How the suite shares itself among pytest-xdist workers (tests/fixtures/parallel.py, live.py): each
worker flushes a Redis database of its own, and a test goes to the worker of the widest fixture it
shares, per parameter."""

from __future__ import annotations

import pytest

from tests.fixtures.live import live_redis_db


def test_a_single_process_uses_the_database_it_is_given() -> None:
    assert live_redis_db("13", "") == 13
    assert live_redis_db("13,8,9", "") == 13


def test_workers_count_up_from_one_number() -> None:
    assert [live_redis_db("4", f"gw{n}") for n in range(3)] == [4, 5, 6]


def test_workers_take_their_entry_of_a_list() -> None:
    assert [live_redis_db("13, 8,9", f"gw{n}") for n in range(3)] == [13, 8, 9]


def test_a_list_too_short_for_the_workers_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"RELAY_TEST_LIVE_REDIS_DB='13,8'.*gw2"):
        live_redis_db("13,8", "gw2")
    with pytest.raises(ValueError, match="names no Redis database"):
        live_redis_db(" ", "")


@pytest.fixture(scope="module", params=["a", "b"])
def shared(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_test_on_a_module_fixture_is_grouped_by_module_and_parameter(
    shared: str, request: pytest.FixtureRequest
) -> None:
    from tests.fixtures.parallel import group_of

    group = group_of(request.node)
    assert group == f"tests/unit/test_parallel_isolation.py::shared={shared}"
    # what xdist's loadgroup takes for the group: after the last "@", and only with no "]" after it
    nodeid = f"{request.node.nodeid}@{group}"
    assert nodeid.rfind("@") > nodeid.rfind("]") and nodeid.split("@")[-1] == group


def test_a_test_on_function_fixtures_only_has_no_group(
    tmp_path: object, request: pytest.FixtureRequest
) -> None:
    from tests.fixtures.parallel import group_of

    assert group_of(request.node) is None
