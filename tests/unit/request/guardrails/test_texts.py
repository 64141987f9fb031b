"""SPEC §20's input texts: every text a request sends upstream is a slot (system, messages' text content
and text blocks, tool results, Responses ``input``/``instructions``, embeddings ``input``), and writing a
slot changes only that text; model names, tool calls and images are not text."""

from __future__ import annotations

from relay.request.guardrails.texts import slots


def texts(body: dict[str, object]) -> list[str]:
    return [s.text for s in slots(body)]


def test_openai_chat_strings_parts_and_tool_results() -> None:
    body = {
        "model": "gpt",
        "messages": [
            {"role": "system", "content": "be kind"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "u"}}],
            },
            {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}], "content": None},
            {"role": "tool", "tool_call_id": "t", "content": "42 degrees"},
        ],
    }
    assert texts(body) == ["be kind", "hi", "42 degrees"]


def test_anthropic_system_blocks_and_tool_results() -> None:
    body = {
        "model": "claude",
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "question"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"text": "no"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "result"}],
                    }
                ],
            },
        ],
    }
    assert texts(body) == ["sys", "question", "result"]


def test_responses_and_embeddings() -> None:
    assert texts({"model": "m", "instructions": "rules", "input": "ask"}) == ["rules", "ask"]
    items = {
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "function_call_output", "output": "b"},
        ]
    }
    assert texts(items) == ["a", "b"]
    assert texts({"model": "e", "input": ["one", "two"]}) == ["one", "two"]
    assert texts({"model": "e", "input": [[1, 2, 3]]}) == []


def test_writing_a_slot_changes_only_that_text() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    (slot,) = slots(body)
    slot.set("y")
    assert body == {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "y"}]}]}
