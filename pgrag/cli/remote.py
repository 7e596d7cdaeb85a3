"""``pgrag search`` and ``pgrag ask`` through a running service (``PGRAG_URL``): the query is
sent to it (:mod:`pgrag.service.client`, the standard library only), so the command loads no
model; the output, text and ``--json``, is the local command's.

The service answers with its own configuration (its model, generator, reranker and
``PGRAG_MIN_CONFIDENCE``) as its API key's principals. What it cannot do for the terminal is a
usage error naming the way to run the command locally: ``--dsn`` (an explicit database wins
over ``PGRAG_URL``) or ``PGRAG_URL=`` unset.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from pgrag.cli.options import state

if TYPE_CHECKING:
    from pgrag.retrieval.grouping import DocumentHit
    from pgrag.retrieval.search import SearchResult, SearchSettings
    from pgrag.service.client import ServiceClient

LOCALLY = "unset PGRAG_URL (or give --dsn) to run it locally"
EXTRACTIVE = "extractive"  # the offline reader's generator name (pgrag.answer)


def client(ctx: click.Context) -> ServiceClient | None:
    """The service the command should call: PGRAG_URL's, unless --dsn names a database."""
    st = state(ctx)
    if not st.settings.service_url or st.dsn:
        return None
    from pgrag.service.client import ServiceClient

    return ServiceClient(st.settings.service_url, st.settings.service_api_key)


def refuse(option: str, why: str) -> None:
    raise click.UsageError(f"{option} with PGRAG_URL: {why}; {LOCALLY}")


def search(
    service: ServiceClient,
    query: str,
    *,
    collection: str,
    k: int,
    mode: str,
    filter: dict[str, Any] | None,
    settings: SearchSettings | None,
    model: str | None,
    mmr: float | None,
    rerank: bool,
) -> list[SearchResult]:
    body = _search_body(query, collection, k, mode, filter, settings, model, mmr, rerank)
    return [_search_result(hit) for hit in service.search(body)["results"]]


def search_documents(
    service: ServiceClient,
    query: str,
    *,
    chunks_per_document: int,
    collection: str,
    k: int,
    mode: str,
    filter: dict[str, Any] | None,
    settings: SearchSettings | None,
    model: str | None,
    mmr: float | None,
    rerank: bool,
) -> list[DocumentHit]:
    """The service's document-level results (``"group": "document"``)."""
    from pgrag.retrieval.grouping import DocumentHit

    body = _search_body(query, collection, k, mode, filter, settings, model, mmr, rerank)
    body |= {"group": "document", "chunks_per_document": chunks_per_document}
    names = {f.name for f in dataclasses.fields(DocumentHit)} - {"chunks"}
    return [
        DocumentHit(
            **{k: v for k, v in hit.items() if k in names},
            chunks=[_search_result(c) for c in hit.get("chunks") or []],
        )
        for hit in service.search(body)["documents"]
    ]


def _search_body(
    query: str,
    collection: str,
    k: int,
    mode: str,
    filter: dict[str, Any] | None,
    settings: SearchSettings | None,
    model: str | None,
    mmr: float | None,
    rerank: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query, "collection": collection, "k": k, "mode": mode}
    if filter is not None:
        body["filter"] = filter
    if settings is not None:
        tuning = {k: v for k, v in dataclasses.asdict(settings).items() if v is not None}
        if tuning:
            body["settings"] = tuning
    if model is not None:
        body["model"] = model
    if mmr is not None:
        body["mmr"] = mmr
    if rerank:
        body["rerank"] = True
    return body


def _search_result(hit: dict[str, Any]) -> SearchResult:
    from pgrag.retrieval.search import SearchResult

    names = {f.name for f in dataclasses.fields(SearchResult)}
    return SearchResult(**{k: v for k, v in hit.items() if k in names})


class RemoteAnswer:
    """The service's answer as the CLI shows it: the local ``Answer.to_dict()``'s keys, and
    the attributes the text output reads."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getattr__(self, name: str) -> Any:
        if name == "data":
            raise AttributeError(name)
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def citations(self) -> list[Any]:
        from pgrag.answer.citations import Citation

        names = {f.name for f in dataclasses.fields(Citation)}
        cited = self.data.get("citations") or []
        return [Citation(**{k: v for k, v in c.items() if k in names}) for c in cited]

    def to_dict(self) -> dict[str, Any]:
        return {k: self.data.get(k) for k in _answer_keys()}


def _answer_keys() -> list[str]:
    from pgrag.answer.result import Answer

    blank = Answer("", "", False, None, [], [], "", {}, "")
    return list(blank.to_dict())


def ask(
    service: ServiceClient,
    question: str,
    *,
    collection: str,
    k: int,
    budget: int,
    context: str,
    log: bool,
    min_confidence: float | None | str,
    on_token: Any,
) -> RemoteAnswer:
    body: dict[str, Any] = {
        "question": question,
        "collection": collection,
        "k": k,
        "budget_tokens": budget,
        "context": context,
        "log": log,
    }
    if min_confidence != "configured":
        # No threshold: 0, which no confidence is below (the answer's threshold reads 0.0).
        body["min_confidence"] = 0.0 if min_confidence is None else min_confidence
    if on_token is None:
        return RemoteAnswer(service.ask(body))
    # The service sends the offline extractive reader's answer as one token, which the local
    # command does not stream: the first token waits for a second one (or the answer) to tell.
    held: list[str] = []
    streaming = False

    def relay(piece: str) -> None:
        nonlocal streaming
        if streaming:
            on_token(piece)
            return
        held.append(piece)
        if len(held) > 1:
            streaming = True
            for text in held:
                on_token(text)

    answer = service.ask(body, relay)
    if not streaming and held and answer.get("generator") != EXTRACTIVE:
        for text in held:
            on_token(text)
    return RemoteAnswer(answer)
