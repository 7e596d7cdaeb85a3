"""Tool calling with a local model as text (pgrag/llm/local_tools.py): the prompt it writes
and how it reads the model's reply back into OpenAI's shape. With a stand-in llama_cpp, the
agentic loop: tests/integration/test_local_agentic.py; that the prompt is the one Qwen2.5's
own chat template writes, with the real llama-cpp-python: test_local_llm_real.py."""

from __future__ import annotations

import json

from pgrag.answer.tools import search_tool
from pgrag.llm.local_tools import describe_tools, parse_reply, plain_messages

TOOL = search_tool("docs")


def test_the_tools_are_described_after_the_system_message_as_json_signatures() -> None:
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Q?"}]
    out = plain_messages(messages, [TOOL])
    assert out[1] == messages[1] and out[0]["role"] == "system"
    system = out[0]["content"]
    assert system.startswith("Answer.\n\n# Tools\n\n")
    line = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert json.loads(line) == TOOL  # the signature is the tool definition itself
    assert system.endswith("within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                           '{{"name": <function-name>, "arguments": <args-json-object>}}\n'
                           "</tool_call>")  # fmt: skip
    # No tools: the messages as they are, nothing described.
    assert plain_messages(messages, None) == messages
    # No system message: the description is one.
    alone = plain_messages(messages[1:], [TOOL])
    assert alone[0]["content"] == describe_tools([TOOL]).lstrip("\n")


def test_earlier_calls_and_results_become_the_models_text_and_a_user_turn() -> None:
    arguments = json.dumps({"query": "Lisbon office", "k": 2})
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "function": {"name": "pgrag_search", "arguments": arguments}},
                {"id": "b", "function": {"name": "pgrag_search", "arguments": {"query": "café"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "[3] A\n<<<\nopens at 8\n>>>"},
        {"role": "tool", "tool_call_id": "b", "content": "(no new sources were found)"},
        {"role": "assistant", "content": "Let me look again.", "tool_calls": [
            {"id": "c", "function": {"name": "pgrag_search", "arguments": '{"query": "x"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "(no new sources were found)"},
    ]  # fmt: skip
    out = plain_messages(messages, None)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert all(set(m) == {"role", "content"} for m in out)
    assert out[2]["content"] == (
        '<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "Lisbon office", "k": 2}}'
        '\n</tool_call>\n<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "café"}}'
        "\n</tool_call>"
    )
    # Two results in a row share one turn.
    assert out[3]["content"] == (
        "<tool_response>\n[3] A\n<<<\nopens at 8\n>>>\n</tool_response>\n"
        "<tool_response>\n(no new sources were found)\n</tool_response>"
    )
    assert out[4]["content"] == (
        'Let me look again.\n<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "x"}}'
        "\n</tool_call>"
    )
    assert out[5]["content"].startswith("<tool_response>\n(no new")
    assert messages[2]["content"] is None  # the caller's messages are left as they were


def test_tool_call_blocks_are_read_back_as_calls() -> None:
    reply = parse_reply(
        '<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "refund window"}}\n'
        "</tool_call>"
    )
    assert reply == {
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "pgrag_search", "arguments": {"query": "refund window"}},
            }
        ],
    }
    # Text around the calls is the content; two calls; a missing closing tag at the end.
    two = parse_reply(
        'I will search.\n<tool_call>{"name": "pgrag_search", "arguments": {"query": "a"}}'
        '</tool_call>\n<tool_call>\n{"name": "pgrag_search", "arguments": "{\\"query\\": \\"b\\"}"}'
    )
    assert two["content"] == "I will search."
    args = [c["function"]["arguments"] for c in two["tool_calls"]]
    assert args == [{"query": "a"}, '{"query": "b"}']


def test_a_block_that_is_not_a_call_object_keeps_its_text_for_the_error() -> None:
    broken = '{"name": "pgrag_search", "arguments": {"query": "x"}'  # a brace short
    reply = parse_reply(f"<tool_call>\n{broken}\n</tool_call>")
    [call] = reply["tool_calls"]
    assert call["function"] == {"name": "pgrag_search", "arguments": broken}
    nameless = parse_reply("<tool_call>search for refunds</tool_call>")
    assert nameless["tool_calls"][0]["function"] == {"name": "", "arguments": "search for refunds"}


def test_a_reply_that_is_only_a_call_object_is_a_call_and_other_json_is_an_answer() -> None:
    llama_style = parse_reply('{"name": "pgrag_search", "parameters": {"query": "vpn"}}')
    assert llama_style["content"] is None
    assert llama_style["tool_calls"][0]["function"]["arguments"] == {"query": "vpn"}
    fenced = parse_reply('```json\n{"name": "pgrag_search", "arguments": {"query": "vpn"}}\n```')
    assert fenced["tool_calls"][0]["function"]["name"] == "pgrag_search"
    for answer in (
        "Answer: 14 days\nExplanation: Monthly plans are refunded within 14 days [1].",
        '{"answer": "14 days [1]"}',
        '{"name": "Ada", "age": 36}',  # an object with a name, but not a call
    ):
        assert parse_reply(answer) == {"content": answer, "tool_calls": []}
