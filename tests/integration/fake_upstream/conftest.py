from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream


@pytest.fixture
def client(fake: FakeUpstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake.base_url, timeout=10.0) as c:
        yield c
