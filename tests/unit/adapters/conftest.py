"""Fixtures for adapter tests (pure functions: no sockets, no databases)."""

from __future__ import annotations

import pytest

from relay.fake_upstream import anthropic as fake_anthropic
from relay.fake_upstream import openai_chat as fake_chat
from relay.fake_upstream import responses as fake_responses


@pytest.fixture
def deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed ids and clock in the fake's renderers, so two renders of one body give equal bytes."""
    for module in (fake_chat, fake_responses, fake_anthropic):
        monkeypatch.setattr(module, "new_id", lambda prefix, nbytes=12: prefix + "0" * nbytes)
    monkeypatch.setattr(fake_chat.time, "time", lambda: 1_700_000_000.0)
