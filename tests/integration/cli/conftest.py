"""One ``relay demo`` for the whole package: the CLI tests and the docs' examples run against it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cli.demo_process import Demo


@pytest.fixture(scope="package")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    process = Demo(tmp_path_factory.mktemp("demo")).start()
    try:
        yield process
    finally:
        process.stop()
