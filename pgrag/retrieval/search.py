"""Hybrid search from Python: embed the question, call ``pgrag.search_v5`` in the database.

All ranking happens in SQL (one function call: vector arm, BM25 keyword arm, Reciprocal Rank
Fusion), so Python, psql and any other client get the same results under the same permissions.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, LiteralString, overload

from pgrag.db import principals as access
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.db.replica import read
from pgrag.embeddings.models import query_model
from pgrag.embeddings.query_cache import check_query_vector, embed_query
from pgrag.errors import CollectionNotFound, DatabaseError, InputError, PgragError
from pgrag.retrieval.filter_values import check_filter_values
from pgrag.retrieval.rerank import mmr as mmr_order
from pgrag.retrieval.rerank import rerank

if TYPE_CHECKING:
    from psycopg import sql

    from pgrag.db.connect import Database
    from pgrag.retrieval.expansion import QueryRewrite
    from pgrag.retrieval.grouping import DocumentHit
    from pgrag.retrieval.rerank import Reranker

Q = queries.load(__name__)

MODES = ("hybrid", "keyword", "vector")
UNDEFINED_OBJECT = "42704"  # search_v5's SQLSTATE for a collection that does not exist
# search_v5's bound on query_text (sql/functions/search.sql), checked here before embedding.
MAX_QUERY_CHARS = 20000

# What a search returns: the columns of pgrag.search_v5, in SearchResult's order.
COLUMNS: LiteralString = (
    "rank, score, chunk_id, document_id, source, title, section, text,"
    " vector_rank, keyword_rank, vector_distance, keyword_score, metadata, probability"
)
# The arguments every call passes; the tuning knobs (SearchSettings) and the model are named
# only when given, so search_v5's own defaults apply to the rest.
_ARGUMENTS = ("collection", "query", "embedding", "k", "filter")


@dataclass(frozen=True)
class SearchSettings:
    """Tuning knobs of ``pgrag.search_v5``; None leaves the function's default (see
    sql/functions/search.sql and docs/search.md for what each does and how the defaults were
    chosen). ``postings_per_term=0`` turns keyword pruning off (exact BM25 reads every posting);
    ``fallback_chunks=0`` turns off the keyword fallback for queries nothing else matched."""

    rrf_k: int | None = None
    vector_weight: float | None = None
    keyword_weight: float | None = None
    vector_depth: int | None = None
    keyword_depth: int | None = None
    temperature: float | None = None
    postings_per_term: int | None = None
    fallback_chunks: int | None = None

    def arguments(self) -> dict[str, Any]:
        """The named arguments to pass, as {name: value}; pruning off is passed as NULL."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = None if (f.name == "postings_per_term" and value == 0) else value
        return out


def _statement(
    columns: LiteralString,
    value: Callable[[str], sql.Composable],
    options: Iterable[str],
) -> sql.Composed:
    """The ``search`` query with its select list, its arguments (``value(name)``), and the
    named ``options`` (``, name => value(name)``) composed in."""
    from psycopg import sql

    named = [sql.SQL(", {} => {}").format(sql.Identifier(n), value(n)) for n in options]
    return sql.SQL(Q.search).format(
        columns=sql.SQL(columns),
        options=sql.SQL("").join(named),
        **{name: value(name) for name in _ARGUMENTS},
    )


def call_sql(
    settings: SearchSettings | None = None, *, columns: LiteralString = COLUMNS, model: bool = False
) -> sql.Composed:
    """``SELECT columns FROM pgrag.search_v5(...)`` with psycopg named placeholders:
    %(collection)s, %(query)s, %(embedding)s, %(k)s, %(filter)s, one per setting given, and
    %(model)s (the model the query was embedded with) if ``model``."""
    options = (*(settings or SearchSettings()).arguments(), *(("model",) if model else ()))
    return _call_sql(columns, options)


@functools.lru_cache(maxsize=256)
def _call_sql(columns: LiteralString, options: tuple[str, ...]) -> sql.Composed:
    # (Composed once per shape of call: composing it cost a keyword search a twentieth of its
    # time.)
    from psycopg import sql

    return _statement(columns, sql.Placeholder, options)


@dataclass(frozen=True)
class SearchResult:
    rank: int
    score: float
    chunk_id: int
    document_id: int
    source: str
    title: str | None
    section: str | None
    text: str
    vector_rank: int | None
    keyword_rank: int | None
    vector_distance: float | None
    keyword_score: float | None
    metadata: dict[str, Any]
    probability: float | None = None  # p(z|x) over the returned results (softmax)
    rerank_score: float | None = None  # the reranker's score, when one reordered the results

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search_sql(
    query: str,
    *,
    collection: str = "default",
    k: int = 10,
    mode: str = "hybrid",
    filter: dict[str, Any] | None = None,
    settings: SearchSettings | None = None,
    model: str | None = None,
    principals: Sequence[str] | None = None,
) -> str:
    """The statement :func:`search` runs, as SQL text to paste into psql or an application:
    literals inlined (safely quoted), the query embedding left as ``$1`` (made with ``model``,
    if named), ending with a semicolon. With ``principals``, a transaction that first reads
    as them (``pgrag.principals``), as :func:`search` does."""
    from psycopg import sql

    check_text(query, "the search query")
    if filter is not None:
        check_filter_values(filter, "filter")

    values: dict[str, sql.Composable] = {
        "collection": sql.Literal(collection),
        "query": sql.Literal(None if mode == "vector" else query),
        "embedding": sql.SQL("NULL" if mode == "keyword" else "$1::vector"),
        "k": sql.Literal(k),
        "filter": sql.SQL("{}::jsonb").format(sql.Literal(json.dumps(filter or {}))),
    }
    values |= {
        name: sql.Literal(value)
        for name, value in (settings or SearchSettings()).arguments().items()
    }
    options = [name for name in values if name not in _ARGUMENTS]
    if model is not None and mode != "keyword":
        values["model"] = sql.Literal(model)
        options.append("model")
    statement = _statement(COLUMNS, values.__getitem__, options).as_string(None) + ";"
    if principals is None:
        return statement
    names = sql.Literal(",".join(access.check_principals(principals) or ["public"]))
    read_as = sql.SQL(Q.read_as).format(names=names).as_string(None)
    return f"BEGIN;\n{read_as};\n{statement}\nCOMMIT;"


def check_text(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode (bytes a terminal passed through undecoded, such
    as ``$'\\xff'``, or a lone surrogate): it cannot be hashed, embedded or sent to
    PostgreSQL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InputError(
            f"{what} is not valid UTF-8 text (character {err.start + 1} cannot be encoded):"
            " retype it, or convert it with iconv -t UTF-8"
        ) from None
    if "\x00" in text:
        raise InputError(
            f"{what} contains a NUL character, which PostgreSQL cannot store: remove it"
        )


def collection_model(db: Database, collection: str) -> tuple[str, int] | None:
    """(model name, dimension) of a collection's active model, None without one; raises
    :class:`CollectionNotFound` if the collection does not exist."""
    with transaction(db) as conn:
        row = conn.execute(Q.collection_model, {"name": collection}).fetchone()
    if row is None:
        raise CollectionNotFound(collection)
    return None if row[1] is None else (row[1], row[2])


@overload
def search(
    db: Database,
    query: str,
    *,
    collection: str = ...,
    k: int = ...,
    mode: str = ...,
    filter: dict[str, Any] | None = ...,
    settings: SearchSettings | None = ...,
    reranker: Reranker | None = ...,
    mmr: float | None = ...,
    timings: dict[str, float] | None = ...,
    principals: Sequence[str] | None = ...,
    model: str | None = ...,
    embed_text: str | Sequence[str] | None = ...,
    rewrite: str | QueryRewrite | None = ...,
    group: Literal["chunk"] = ...,
    chunks_per_document: int = ...,
) -> list[SearchResult]: ...


@overload
def search(
    db: Database,
    query: str,
    *,
    collection: str = ...,
    k: int = ...,
    mode: str = ...,
    filter: dict[str, Any] | None = ...,
    settings: SearchSettings | None = ...,
    reranker: Reranker | None = ...,
    mmr: float | None = ...,
    timings: dict[str, float] | None = ...,
    principals: Sequence[str] | None = ...,
    model: str | None = ...,
    embed_text: str | Sequence[str] | None = ...,
    rewrite: str | QueryRewrite | None = ...,
    group: Literal["document"],
    chunks_per_document: int = ...,
) -> list[DocumentHit]: ...


@overload
def search(
    db: Database,
    query: str,
    *,
    collection: str = ...,
    k: int = ...,
    mode: str = ...,
    filter: dict[str, Any] | None = ...,
    settings: SearchSettings | None = ...,
    reranker: Reranker | None = ...,
    mmr: float | None = ...,
    timings: dict[str, float] | None = ...,
    principals: Sequence[str] | None = ...,
    model: str | None = ...,
    embed_text: str | Sequence[str] | None = ...,
    rewrite: str | QueryRewrite | None = ...,
    group: str,
    chunks_per_document: int = ...,
) -> list[SearchResult] | list[DocumentHit]: ...


def search(
    db: Database,
    query: str,
    *,
    collection: str = "default",
    k: int = 10,
    mode: str = "hybrid",
    filter: dict[str, Any] | None = None,
    settings: SearchSettings | None = None,
    reranker: Reranker | None = None,
    mmr: float | None = None,
    timings: dict[str, float] | None = None,
    principals: Sequence[str] | None = None,
    model: str | None = None,
    embed_text: str | Sequence[str] | None = None,
    rewrite: str | QueryRewrite | None = None,
    group: str = "chunk",
    chunks_per_document: int = 3,
) -> list[SearchResult] | list[DocumentHit]:
    """Ranked chunks for ``query``; ``mode`` is hybrid, keyword or vector.

    ``model`` names the embedding model to search with: by default the collection's active
    one; another of its models (one still being built by ``pgrag models reembed``, say) to
    compare before switching.

    With a ``reranker`` (see :mod:`pgrag.retrieval.rerank`), the retriever's top
    ``candidates(k)`` are reordered by it and its best ``k`` kept; ``probability`` is then a
    softmax over the reranker's scores (logits). With ``mmr`` (a lambda in [0, 1]) the final
    ``k`` are picked by Maximal Marginal Relevance over the chunks' stored embeddings, so
    near-duplicates give way to other passages; ``probability`` is renormalised over the picks.

    ``principals`` overrides the connection's (:func:`pgrag.connect`) for this call: only
    chunks they or public may read are searched, counted in BM25 statistics, or returned.
    ``filter`` is a metadata filter (docs/search.md#filters), applied inside the search.

    ``embed_text`` is what the vector arm searches with when it is not ``query`` itself (the
    keyword arm and a reranker always read ``query``): a text, or several texts whose
    embeddings are averaged (HyDE's hypothetical passage and the question). Each text's
    vector is cached as a question's is, under its own text, so a later search of ``query``
    alone is not changed by it.

    ``rewrite`` (``"hyde"``, ``"multi"`` or a :class:`pgrag.retrieval.expansion.QueryRewrite`)
    has the configured language model rewrite the question first (docs/search.md, "Query
    rewriting"); when the model fails, the question is searched as asked and a
    :class:`pgrag.retrieval.expansion.RewriteWarning` says so.

    ``group="document"`` returns documents instead of chunks (docs/search.md, "Document-level
    results"): up to ``k`` distinct documents as :class:`pgrag.retrieval.grouping.DocumentHit`,
    ranked by their best chunk, each with its best ``chunks_per_document`` chunks (default 3)
    in rank order. The chunks are a deeper search's (about 1.2k at first, deeper while they
    hold fewer than ``k`` documents, at most 1,000), run with every other argument as given;
    ``timings`` then sums the searches' and adds ``group_depth`` and ``group_searches``.
    """
    from pgrag.retrieval.grouping import check_group

    check_group(group, chunks_per_document)
    if group == "document":
        return _grouped(
            db,
            query,
            k=k,
            chunks_per_document=chunks_per_document,
            timings=timings,
            options={
                "collection": collection,
                "mode": mode,
                "filter": filter,
                "settings": settings,
                "reranker": reranker,
                "mmr": mmr,
                "principals": principals,
                "model": model,
                "embed_text": embed_text,
                "rewrite": rewrite,
            },
        )
    if rewrite is not None:
        if embed_text is not None:
            raise InputError(
                "pass embed_text or rewrite, not both: a rewrite chooses what to embed"
            )
        from pgrag.retrieval.expansion import search_rewritten

        return search_rewritten(
            db,
            query,
            rewrite,
            collection=collection,
            k=k,
            mode=mode,
            filter=filter,
            settings=settings,
            reranker=reranker,
            mmr=mmr,
            timings=timings,
            principals=principals,
            model=model,
        )
    check_arguments(query, mode=mode, k=k, filter=filter, mmr=mmr)
    embedded = embedded_texts(query, embed_text)
    from psycopg.types.json import Jsonb

    t0 = time.perf_counter()
    embedding = None
    model_name = None
    model_id = None
    # A keyword search needs no model: it is the one statement below (whose error for a
    # missing collection becomes CollectionNotFound), so that the layer adds little to it.
    if mode != "keyword" or mmr is not None:
        resolved = query_model(db, collection, model)  # (CollectionNotFound if it is missing)
        if resolved is None and mmr is not None:
            raise InputError(f"mmr needs embeddings, and collection {collection!r} has none yet")
        if resolved is not None:
            spec, embedder = resolved
            model_name, model_id = spec.name, spec.id
            readers = db.principals if principals is None else principals
            vectors = [embed_query(db, spec, embedder, t, readers) for t in embedded]
            embedding = vectors[0] if len(vectors) == 1 else mean_vector(vectors, embedder.name)
    t1 = time.perf_counter()
    fetch = candidates(k) if (reranker is not None or mmr is not None) else k
    readers = db.principals if principals is None else principals
    arguments = {
        "model": model_name,
        "collection": collection,
        "query": None if mode == "vector" else query,
        "embedding": None if mode == "keyword" else embedding,
        "k": fetch,
        "filter": Jsonb(filter or {}),
        **(settings or SearchSettings()).arguments(),
    }

    def run(conn: Any) -> Any:
        access.apply(conn, readers)
        return conn.execute(call_sql(settings, model=model_name is not None), arguments).fetchall()

    try:
        rows = read(db, run)  # (the read replica's, when there is one: pgrag.db.replica)
    except DatabaseError as err:
        cause = err.__cause__
        primary = getattr(getattr(cause, "diag", None), "message_primary", None) or ""
        if getattr(cause, "sqlstate", None) == UNDEFINED_OBJECT and primary.startswith(
            "collection "
        ):
            raise CollectionNotFound(collection) from None
        raise
    results = [SearchResult(*row) for row in rows]
    t2 = time.perf_counter()
    if reranker is not None:
        results = reranked(query, results, reranker, k if mmr is None else fetch)
    t3 = time.perf_counter()
    if mmr is not None and results:
        results = _diversified(db, collection, model_id, embedding, results, k, mmr)
    results = results[:k]
    if timings is not None:
        timings["embed_ms"] = round((t1 - t0) * 1000, 2)
        timings["retrieve_ms"] = round((t2 - t1) * 1000, 2)
        if reranker is not None:
            timings["rerank_ms"] = round((t3 - t2) * 1000, 2)
    return results


def _grouped(
    db: Database,
    query: str,
    *,
    k: int,
    chunks_per_document: int,
    timings: dict[str, float] | None,
    options: dict[str, Any],
) -> list[DocumentHit]:
    """``search(..., group="document")``: the chunk searches, folded into documents."""
    from pgrag.retrieval.grouping import grouped

    check_arguments(query, mode=options["mode"], k=k, filter=options["filter"], mmr=options["mmr"])

    def fetch(depth: int) -> list[SearchResult]:
        spent: dict[str, float] = {}
        results = search(db, query, k=depth, timings=spent, **options)
        if timings is not None:
            for name, value in spent.items():
                timings[name] = round(timings.get(name, 0.0) + value, 2)
        return results

    return grouped(fetch, k, chunks_per_document, timings)


def check_arguments(
    query: str, *, mode: str, k: int, filter: dict[str, Any] | None, mmr: float | None
) -> None:
    """What :func:`search` refuses before it embeds or asks anything: a one-line
    :class:`InputError` for each bad argument."""
    if mode not in MODES:
        raise InputError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if not query or not query.strip():
        raise InputError("the search query is empty; pass some words to search for")
    check_length(query, "the search query")
    if not 1 <= k <= 1000:
        raise InputError(f"k must be between 1 and 1000, got {k}")
    if filter is not None and not isinstance(filter, dict):
        raise InputError(f"filter must be a dict such as {{'team': 'billing'}}, got {filter!r}")
    if filter is not None:
        check_filter_values(filter, "filter")
    if mmr is not None and not 0.0 <= mmr <= 1.0:
        raise InputError(f"mmr must be between 0 and 1 (1 = relevance only), got {mmr}")


def check_length(text: str, what: str) -> None:
    """Valid text (:func:`check_text`) of at most :data:`MAX_QUERY_CHARS` characters."""
    check_text(text, what)
    if len(text) > MAX_QUERY_CHARS:
        raise InputError(
            f"{what} is {len(text)} characters; the limit is {MAX_QUERY_CHARS}:"
            " search with a shorter question"
        )


def embedded_texts(query: str, embed_text: str | Sequence[str] | None) -> list[str]:
    """The texts whose embeddings the vector arm searches with (see :func:`search`)."""
    if embed_text is None:
        return [query]
    texts = [embed_text] if isinstance(embed_text, str) else list(embed_text)
    if not texts:
        raise InputError("embed_text is an empty list; pass a text to embed, or None")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"embed_text holds {text!r}; each text to embed must have words")
        check_length(text, "the text to embed")
    return texts


def mean_vector(vectors: Sequence[Any], model: str) -> Any:
    """The mean of ``vectors``, scaled to their mean length (unit length for a normalised
    model, the scale of its own vectors for any other)."""
    import numpy as np

    stacked = np.asarray(vectors, dtype=np.float64)
    mean = stacked.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    length = float(np.linalg.norm(stacked, axis=1).mean())
    out = (mean * (length / norm) if norm > 0 else mean).astype(np.float32)
    check_query_vector(out, model)
    return out


def candidates(k: int) -> int:
    """How many results a second stage (reranker, MMR) chooses its ``k`` from."""
    return min(1000, max(4 * k, 40))


def reranked(
    query: str, results: list[SearchResult], reranker: Reranker, keep: int
) -> list[SearchResult]:
    """The best ``keep`` of ``results`` by ``reranker``'s scores for ``query``, renumbered,
    each with its score and a softmax over the scores as its probability."""
    ranked = rerank(query, results, reranker, top_k=keep)
    if not ranked:
        return []
    top = max(score for _, score in ranked)
    weights = [math.exp(score - top) for _, score in ranked]
    total = sum(weights)
    return [
        replace(r, rank=i + 1, rerank_score=score, probability=w / total)
        for i, ((r, score), w) in enumerate(zip(ranked, weights, strict=True))
    ]


def _diversified(
    db: Database,
    collection: str,
    model_id: int | None,
    embedding: Any,
    results: list[SearchResult],
    k: int,
    lambda_: float,
) -> list[SearchResult]:
    import numpy as np
    import psycopg

    ids = [r.chunk_id for r in results]
    try:
        arguments = {"c": collection, "m": model_id, "ids": ids}
        rows = read(db, lambda conn: conn.execute(Q.chunk_vectors, arguments).fetchall())
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            raise PgragError(
                "mmr reads the stored vectors, which restricted roles (pgrag_reader, pgrag_app)"
                " may not; search without mmr, or with a reranker"
            ) from err
        raise
    vectors = {chunk_id: vector.to_numpy() for chunk_id, vector in rows}
    kept = [r for r in results if r.chunk_id in vectors]
    matrix = np.asarray([vectors[r.chunk_id] for r in kept], dtype=np.float32)
    picks = [kept[i] for i in mmr_order(np.asarray(embedding), matrix, k=k, lambda_=lambda_)]
    total = sum(r.probability or 0.0 for r in picks)
    return [
        replace(r, rank=i + 1, probability=(r.probability or 0.0) / total if total else None)
        for i, r in enumerate(picks)
    ]
