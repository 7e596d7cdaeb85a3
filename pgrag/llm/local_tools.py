"""Tool calling with a local GGUF model, as text: what ``pgrag ask --agentic`` needs from it.

An OpenAI-compatible server turns ``tools`` into the model's own prompt format and its reply
back into ``tool_calls``; llama-cpp-python does neither for ``tool_choice="auto"`` (its chat
handler only constrains a reply to one named tool). So :func:`respond` does it here, in the
format Qwen2.5 (and Hermes-style models) are trained on:

- the tools are described at the end of the system message, in a ``<tools></tools>`` block of
  JSON signatures, with the instruction to reply ``<tool_call>{"name": ..., "arguments":
  ...}</tool_call>`` -- word for word what Qwen2.5's chat template writes when given
  ``tools``, so for that model the prompt is the one it was trained with;
- the model's earlier calls go back as its own text (``<tool_call>`` blocks) and the tools'
  results as a user turn of ``<tool_response>`` blocks -- again what Qwen2.5's template
  renders for ``tool_calls`` and ``role: tool`` messages, byte for byte -- so any chat
  template, including one that knows nothing of tools, renders the exchange the same way;
- the reply is read back into OpenAI's shape: each ``<tool_call>`` block (or a reply that is
  only a ``{"name": ..., "arguments": ...}`` object, as Llama 3.x models write them) becomes a
  call; a block that is not such JSON still becomes a call, with its text as the arguments,
  so the caller sends the model an error to correct rather than taking markup for an answer.

The conversation keeps the same prefix from one step to the next, so llama.cpp re-reads only
what was added (llama-cpp-python reuses the longest cached prefix of a prompt).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# Qwen2.5's chat template (tokenizer.chat_template of its GGUF files) writes exactly this
# after the system message when it is given tools. The doubled braces are in the template
# too, so they are what the model saw in training.
_TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and"
    " arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.S)


def describe_tools(tools: Sequence[dict[str, Any]]) -> str:
    """What is appended to the system message to offer ``tools`` (OpenAI tool definitions)."""
    signatures = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return _TOOLS_HEAD + signatures + _TOOLS_TAIL


def _arguments(raw: Any) -> Any:
    """A call's arguments as the model writes them: an object (a JSON string is decoded)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function", call)
    name = function.get("name")
    arguments = json.dumps(_arguments(function.get("arguments") or {}), ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def plain_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> list[dict[str, str]]:
    """``messages`` (OpenAI's format, with ``tool_calls`` and ``role: tool``) as plain
    system / user / assistant text turns, the tools described in the system message."""
    out: list[dict[str, str]] = []
    after_tool = False  # consecutive results share one user turn, as Qwen2.5 renders them
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if after_tool:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            after_tool = True
            continue
        after_tool = False
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        out.append({"role": role, "content": content})
    if tools:
        description = describe_tools(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] += description
        else:
            out.insert(0, {"role": "system", "content": description.lstrip("\n")})
    return out


def _object(text: str) -> dict[str, Any] | None:
    fenced = _FENCE.match(text.strip())
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _as_call(body: str) -> dict[str, Any]:
    """One ``<tool_call>`` block as an OpenAI tool call. What is not a ``{"name", "arguments"}``
    object keeps its text as the arguments (the caller reports what is wrong with them)."""
    value = _object(body)
    if value is not None and isinstance(value.get("name"), str):
        arguments = value.get("arguments", value.get("parameters", {}))
        return {"type": "function", "function": {"name": value["name"], "arguments": arguments}}
    named = re.search(r'"name"\s*:\s*"([^"]*)"', body)
    return {
        "type": "function",
        "function": {"name": named.group(1) if named else "", "arguments": body},
    }


def parse_reply(text: str) -> dict[str, Any]:
    """The model's reply as :meth:`pgrag.llm.chat.ChatClient.respond` returns one:
    ``{"content": str | None, "tool_calls": [...]}`` (see the module)."""
    blocks = _CALL.findall(text)
    if blocks:
        content = _CALL.sub("", text).strip()
        return {"content": content or None, "tool_calls": [_as_call(b) for b in blocks]}
    value = _object(text)
    if (
        value is not None
        and isinstance(value.get("name"), str)
        and ("arguments" in value or "parameters" in value)
        and set(value) <= {"name", "arguments", "parameters"}
    ):
        return {"content": None, "tool_calls": [_as_call(text)]}
    return {"content": text, "tool_calls": []}
