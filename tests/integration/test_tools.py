"""pgrag search as an OpenAI-format tool: its definition, and running a model's calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pgrag
from pgrag.answer.tools import call_search_tool


def test_calls_run_the_search_under_the_users_principals(
    db: Any, corpus: Path, tmp_path: Path
) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    secret = tmp_path / "bonus.md"
    secret.write_text("# Bonus\n\nThe refund of the bonus pool is decided in March.\n")
    pgrag.ingest(db, [secret], collection="docs", allow=["alice"])
    out = call_search_tool(db, "docs", '{"query": "refund annual plans", "k": 3}', first_n=4)
    assert [r["n"] for r in out["results"]] == [4, 5, 6]
    assert out["results"][0]["source"].endswith("refunds.md")
    bob = call_search_tool(db, "docs", {"query": "bonus pool refund"}, principals=["bob"])
    assert all(not r["source"].endswith("bonus.md") for r in bob["results"])
    alice = call_search_tool(db, "docs", {"query": "bonus pool refund"}, principals=["alice"])
    assert alice["results"][0]["source"].endswith("bonus.md")
    filtered = call_search_tool(db, "docs", {"query": "office", "filter": {"format": "text"}})
    assert {Path(r["source"]).name for r in filtered["results"]} == {"office.txt"}


def test_bad_arguments_go_back_to_the_model(db: Any, corpus: Path) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    for arguments, message in (
        ("not json", "not a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ('{"q": "x"}', "unknown arguments ['q']"),
        ('{"query": ""}', "non-empty string"),
        ('{"query": "x", "k": 50}', "from 1 to 20"),
        ('{"query": "x", "k": true}', "from 1 to 20"),
        ('{"query": "x", "filter": "team"}', "filter must be a JSON object"),
        ('{"query": "x", "filter": {"n": {"$nope": 1}}}', "$nope"),
    ):
        out = call_search_tool(db, "docs", arguments)
        assert set(out) == {"error"} and message in out["error"], (arguments, out)
