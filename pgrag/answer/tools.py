"""pgrag search as a tool for a tool-calling model (OpenAI's function-calling format).

``search_tool(collection)`` is the tool definition to send in a chat request's ``tools``;
``call_search_tool(db, collection, arguments)`` runs a call the model made and returns what to
send back as the tool message's content. Bad arguments come back as ``{"error": ...}`` for the
model to correct, not as an exception: the model wrote them, not the user. The search runs
under the connection's principals (or ``principals``), so a model sees what its user may read
and nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgrag.errors import DatabaseError, InputError
from pgrag.retrieval.search import SearchResult, search

if TYPE_CHECKING:
    from pgrag.db.connect import Database

NAME = "pgrag_search"
MAX_K = 20


def search_tool(collection: str) -> dict[str, Any]:
    """The tool definition (``{"type": "function", "function": {...}}``)."""
    return {
        "type": "function",
        "function": {
            "name": NAME,
            "description": (
                f"Search the document collection {collection!r} (hybrid keyword and semantic"
                " search). Returns numbered passages with their source and title. Search again"
                " with other words when the passages do not answer the question; cite passages"
                " by their number, like [2]."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What to look for, in words likely to appear in the text.",
                    },
                    "k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_K,
                        "description": "How many passages to return (default 5).",
                    },
                    "filter": {
                        "type": "object",
                        "description": "Only documents whose metadata matches, e.g."
                        ' {"team": "billing"}.',
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


def parse_arguments(arguments: str | dict[str, Any]) -> tuple[str, int, Any] | str:
    """(query, k, filter) from a call's arguments, or what is wrong with them."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except (ValueError, TypeError) as err:
        return f'the arguments are not a JSON object ({err}); send {{"query": ...}}'
    if not isinstance(args, dict):
        return 'the arguments must be a JSON object such as {"query": "refund window"}'
    unknown = sorted(set(args) - {"query", "k", "filter"})
    if unknown:
        return f"unknown arguments {unknown}; use query, k and filter"
    query, k, filt = args.get("query"), args.get("k", 5), args.get("filter")
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string"
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        return f"k must be an integer from 1 to {MAX_K}"
    if filt is not None and not isinstance(filt, dict):
        return 'filter must be a JSON object such as {"team": "billing"}'
    return query, k, filt


def run_search_call(
    db: Database,
    collection: str,
    arguments: str | dict[str, Any],
    *,
    principals: Sequence[str] | None = None,
) -> list[SearchResult] | str:
    """The results of one call, or (for the model to correct) what is wrong with it."""
    import psycopg

    parsed = parse_arguments(arguments)
    if isinstance(parsed, str):
        return parsed
    query, k, filt = parsed
    try:
        return search(db, query, collection=collection, k=k, filter=filt, principals=principals)
    except InputError as err:
        return str(err)
    except DatabaseError as err:  # a filter the database refused (22023)
        refused = (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue)
        if not isinstance(err.__cause__, refused):
            raise
        return str(err)


def call_search_tool(
    db: Database,
    collection: str,
    arguments: str | dict[str, Any],
    *,
    first_n: int = 1,
    principals: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run one call of the tool; passages are numbered from ``first_n`` (so that numbers stay
    unique across several calls in one conversation)."""
    results = run_search_call(db, collection, arguments, principals=principals)
    if isinstance(results, str):
        return {"error": results}
    return {
        "results": [
            {
                "n": first_n + i,
                "chunk_id": r.chunk_id,
                "source": r.source,
                "title": r.title,
                "section": r.section,
                "text": r.text,
            }
            for i, r in enumerate(results)
        ]
    }
