"""pgrag search as an OpenAI-format tool: its definition. Running a model's calls against a
real database: tests/integration/test_tools.py.
"""

from __future__ import annotations

import json

from pgrag.answer.tools import NAME, search_tool


def test_the_tool_definition_is_openai_function_json() -> None:
    tool = json.loads(json.dumps(search_tool("handbook")))
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == NAME == "pgrag_search"
    assert "'handbook'" in function["description"]
    params = function["parameters"]
    assert params["type"] == "object" and params["required"] == ["query"]
    assert set(params["properties"]) == {"query", "k", "filter"}
    assert params["additionalProperties"] is False
