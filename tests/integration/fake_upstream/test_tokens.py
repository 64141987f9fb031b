"""The documented counting rule, as a pure function tests elsewhere can rely on."""

from __future__ import annotations

from relay.fake_upstream import complete, input_tokens
from relay.fake_upstream.token_counts import DEFAULT_MAX_WORDS


def test_input_tokens_count_words_everywhere() -> None:
    body = {
        "system": "two words",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "image", "source": {}}]},
            {"role": "assistant", "content": "c"},
        ],
    }
    assert input_tokens("messages", body) == 5
    assert input_tokens("chat", {"messages": []}) == 1  # never zero
    assert input_tokens("embeddings", {"input": [[1, 2, 3], [4]]}) == 4


def test_reply_echoes_last_user_message() -> None:
    body = {"messages": [{"role": "user", "content": "old"}, {"role": "user", "content": " new\n text "}]}
    result = complete("chat", body)
    assert result.text == "Echo: new text"
    assert (result.output_tokens, result.truncated) == (3, False)
    assert complete("chat", {"messages": []}).text == "Echo:"


def test_reply_length_caps() -> None:
    long_text = " ".join(["w"] * 200)
    capped = complete("chat", {"messages": [{"role": "user", "content": long_text}]})
    assert capped.output_tokens == DEFAULT_MAX_WORDS and not capped.truncated
    body = {
        "max_completion_tokens": 3,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": long_text}],
    }
    assert complete("chat", body).output_tokens == 3
    assert complete("chat", body).truncated
