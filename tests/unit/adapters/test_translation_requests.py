"""Request mapping of SPEC §7.3, field by field, in both directions of every pair (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from relay.adapters import AdapterError, translate_request

SHAPES = ["openai", "anthropic", "openai_responses"]
PNG = "iVBORw0KGgo="


def tr(inbound: str, adapter: str, body: dict[str, Any], default: int = 4096) -> dict[str, Any]:
    return translate_request(inbound, adapter, body, default_max_tokens=default)[0]


# One conversation, spelled in each shape: system, a user turn with text and two images, an assistant
# tool call, its result, and a last user turn; one tool, a named tool choice, limits, sampling, user.
CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    ],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "max_completion_tokens": 50,
    "temperature": 0.5,
    "top_p": 0.9,
    "user": "u-1",
}
ANTHROPIC = {
    "model": "m",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "42"}]},
                {"type": "text", "text": "thanks"},
            ],
        },
    ],
    "system": "be brief",
    "max_tokens": 50,
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "f"},
    "temperature": 0.5,
    "top_p": 0.9,
    "metadata": {"user_id": "u-1"},
}
RESPONSES = {
    "model": "m",
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                {"type": "input_image", "image_url": "https://x.test/a.png"},
            ],
        },
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
    ],
    "instructions": "be brief",
    "tools": [
        {
            "type": "function",
            "name": "f",
            "description": "d",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ],
    "tool_choice": {"type": "function", "name": "f"},
    "max_output_tokens": 50,
    "temperature": 0.5,
    "top_p": 0.9,
    "user": "u-1",
    "store": False,
}
SPELLED = {"openai": CHAT, "anthropic": ANTHROPIC, "openai_responses": RESPONSES}
PAIRS = [(a, b) for a in SHAPES for b in SHAPES if a != b]


@pytest.mark.parametrize(("inbound", "adapter"), PAIRS)
def test_the_same_conversation_translates_to_the_other_spelling(inbound: str, adapter: str) -> None:
    """System text, text and image parts, tool call ↔ tool_use ↔ function_call, tool results by id,
    tools, named tool_choice, token limit, temperature, top_p and the end-user id, every direction."""
    expected = dict(SPELLED[adapter])
    if (inbound, adapter) == ("openai_responses", "openai"):  # an explicit strict flag is kept
        expected["tools"] = [
            {"type": "function", "function": {**CHAT["tools"][0]["function"], "strict": False}}
        ]
    got = tr(inbound, adapter, SPELLED[inbound])
    assert got == expected


def test_chat_multiple_system_and_developer_messages() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "one"},
            {"role": "developer", "content": [{"type": "text", "text": "two"}]},
            {"role": "user", "content": "hi"},
        ],
    }
    assert tr("openai", "anthropic", body)["system"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    assert tr("openai", "openai_responses", body)["instructions"] == "one\n\ntwo"


@pytest.mark.parametrize(
    ("choice", "anthropic", "responses"),
    [
        ("auto", {"type": "auto"}, "auto"),
        ("none", {"type": "none"}, "none"),
        ("required", {"type": "any"}, "required"),
    ],
)
def test_tool_choice_modes(choice: str, anthropic: dict[str, Any], responses: str) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": CHAT["tools"]}
    chat["tool_choice"] = choice
    assert tr("openai", "anthropic", chat)["tool_choice"] == anthropic
    assert tr("openai", "openai_responses", chat)["tool_choice"] == responses
    back = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ANTHROPIC["tools"],
        "tool_choice": anthropic,
    }
    assert tr("anthropic", "openai", back)["tool_choice"] == choice


def test_tool_choice_without_tools_is_not_sent() -> None:
    """It asks for nothing without tools, and the providers refuse it then."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}
    for adapter in ("anthropic", "openai_responses"):
        out = tr("openai", adapter, {**chat, "parallel_tool_calls": False})
        assert "tool_choice" not in out and "parallel_tool_calls" not in out


def test_parallel_tool_calls_false_maps_to_disable_parallel_tool_use() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": CHAT["tools"]}
    chat["parallel_tool_calls"] = False
    assert tr("openai", "anthropic", chat)["tool_choice"] == {
        "type": "auto",
        "disable_parallel_tool_use": True,
    }
    assert tr("openai", "openai_responses", chat)["parallel_tool_calls"] is False
    back = tr("anthropic", "openai", tr("openai", "anthropic", chat))
    assert back["parallel_tool_calls"] is False


def test_token_limits() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert tr("openai", "anthropic", chat, default=77)["max_tokens"] == 77  # Anthropic needs one
    assert "max_output_tokens" not in tr("openai", "openai_responses", chat)
    assert tr("openai", "anthropic", {**chat, "max_tokens": 9})["max_tokens"] == 9  # the legacy field
    anthropic = {"model": "m", "max_tokens": 12, "messages": [{"role": "user", "content": "hi"}]}
    assert tr("anthropic", "openai", anthropic)["max_completion_tokens"] == 12  # never max_tokens to chat
    assert "max_tokens" not in tr("anthropic", "openai", anthropic)
    assert tr("anthropic", "openai_responses", anthropic)["max_output_tokens"] == 12


def test_stop_sequences() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": "END"}
    assert tr("openai", "anthropic", chat)["stop_sequences"] == ["END"]
    anthropic = {
        "model": "m",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "x"}],
        "stop_sequences": ["a"],
    }
    assert tr("anthropic", "openai", anthropic)["stop"] == ["a"]


@pytest.mark.parametrize(("inbound", "field"), [("openai", "stop"), ("anthropic", "stop_sequences")])
def test_stop_to_responses_is_refused_naming_the_callers_field(inbound: str, field: str) -> None:
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], field: ["a"]}
    with pytest.raises(AdapterError) as info:
        tr(inbound, "openai_responses", body)
    assert info.value.code == "unsupported_parameter"
    assert info.value.message == f"unsupported_parameter: {field} (adapter openai_responses)"


def test_stream_flags() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    out, req = translate_request(
        "openai", "anthropic", {**chat, "stream_options": {"include_usage": True}}, default_max_tokens=1
    )
    assert out["stream"] is True and req.include_usage
    anthropic = {
        "model": "m",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    to_chat = tr("anthropic", "openai", anthropic)
    assert to_chat["stream"] is True and to_chat["stream_options"] == {"include_usage": True}  # Relay meters
    assert tr("anthropic", "openai_responses", anthropic)["stream"] is True


def test_responses_string_input_and_system_items() -> None:
    body = {
        "model": "m",
        "input": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}],
    }
    assert tr("openai_responses", "openai", body)["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
    ]
    assert tr("openai_responses", "anthropic", {"model": "m", "input": "hi"})["messages"] == [
        {"role": "user", "content": "hi"}
    ]


def test_tool_result_error_flag_is_refused_where_it_has_no_counterpart() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "no", "is_error": True}],
            },
        ],
    }
    for adapter in ("openai", "openai_responses"):
        with pytest.raises(AdapterError) as info:
            tr("anthropic", adapter, body)
        assert info.value.message == f"unsupported_parameter: tool_result.is_error (adapter {adapter})"


@pytest.mark.parametrize(
    ("inbound", "adapter", "extra", "param"),
    [
        ("openai", "anthropic", {"n": 2}, "n"),
        ("openai", "anthropic", {"logprobs": True}, "logprobs"),
        ("openai", "anthropic", {"presence_penalty": 0.5}, "presence_penalty"),
        ("openai", "anthropic", {"response_format": {"type": "json_object"}}, "response_format"),
        ("openai", "openai_responses", {"seed": 1}, "seed"),
        ("anthropic", "openai", {"top_k": 5}, "top_k"),
        ("anthropic", "openai", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ("openai_responses", "openai", {"previous_response_id": "resp_1"}, "previous_response_id"),
        ("openai_responses", "anthropic", {"reasoning": {"effort": "low"}}, "reasoning"),
        ("openai_responses", "anthropic", {"text": {"format": {"type": "json_object"}}}, "text"),
        ("openai", "anthropic", {"fake": {"status": 500}}, "fake"),  # unknown fields are refused too
    ],
)
def test_parameters_without_counterpart_are_refused(
    inbound: str, adapter: str, extra: dict[str, Any], param: str
) -> None:
    if inbound == "openai_responses":
        body: dict[str, Any] = {"model": "m", "input": "x"}
    else:
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(AdapterError) as info:
        tr(inbound, adapter, {**body, **extra})
    assert info.value.code == "unsupported_parameter"
    assert info.value.message == f"unsupported_parameter: {param} (adapter {adapter})"


def test_pure_hints_and_default_values_are_dropped() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "store": True,
        "service_tier": "auto",
        "prompt_cache_key": "k",
        "n": 1,
        "logprobs": False,
        "presence_penalty": 0,
        "parallel_tool_calls": True,
    }
    out = tr("openai", "anthropic", body)
    assert set(out) == {"model", "messages", "max_tokens"}


def test_anthropic_cache_control_is_dropped() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    out = tr("anthropic", "openai", body)
    assert out["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("inbound", "adapter", "body", "param"),
    [
        (
            "openai",
            "anthropic",
            {"messages": [{"role": "user", "content": "x", "name": "bob"}]},
            "messages[].name",
        ),
        (
            "openai",
            "anthropic",
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages[].content[].input_audio",
        ),
        (
            "anthropic",
            "openai",
            {
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            "messages[].content[].document",
        ),
        (
            "openai_responses",
            "openai",
            {"input": [{"type": "web_search_call", "id": "w"}]},
            "input[].web_search_call",
        ),
        ("openai_responses", "anthropic", {"input": "x", "tools": [{"type": "web_search"}]}, "tools[].type"),
        (
            "openai",
            "anthropic",
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f", "strict": True}}],
            },
            "tools[].strict",
        ),
    ],
)
def test_nested_parts_without_counterpart_are_refused(
    inbound: str, adapter: str, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(AdapterError) as info:
        tr(inbound, adapter, {"model": "m", **body})
    assert info.value.message == f"unsupported_parameter: {param} (adapter {adapter})"


def test_translation_never_mutates_the_callers_body() -> None:
    import copy

    for inbound, body in SPELLED.items():
        before = copy.deepcopy(body)
        for adapter in SHAPES:
            if adapter != inbound:
                tr(inbound, adapter, body)
        assert body == before
