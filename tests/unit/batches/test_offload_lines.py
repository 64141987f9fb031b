"""A provider's result lines read one by one (SPEC §22): a line that is no readable result — not JSON,
not an object, a field of the wrong type — is skipped rather than stopping the mapping (its item is
then one the provider returned no result for); a readable one maps as the provider module says."""

from __future__ import annotations

import pytest

from relay.batches.offload import anthropic_api, openai_api
from relay.batches.offload.provider import read_line

GARBAGE = [b"not json", b"[1, 2]", b'"text"', b'{"custom_id": "0", "response": {"status_code": "abc"}}']


@pytest.mark.parametrize("raw", GARBAGE)
def test_an_unreadable_line_is_skipped(raw: bytes) -> None:
    assert read_line(raw, "completed", openai_api.line_of) is None


def test_readable_lines_map_as_their_provider_says() -> None:
    ok = b'{"custom_id": "3", "response": {"status_code": 200, "body": {"id": "x"}}}'
    line = read_line(ok, "completed", openai_api.line_of)
    assert line is not None and (line.custom_id, line.state, line.status) == ("3", "completed", 200)
    error = b'{"error": {"type": "invalid_request_error"}}'
    errored = b'{"custom_id": "1", "result": {"type": "errored", "error": ' + error + b"}}"
    line = read_line(errored, "completed", anthropic_api.line_of)
    assert line is not None and (line.state, line.status) == ("discarded", 400)
