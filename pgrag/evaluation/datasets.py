"""Retrieval evaluation datasets: a corpus, queries and relevance judgements (qrels).

Two on-disk formats are read: a BEIR dataset directory (``corpus.jsonl``, ``queries.jsonl``,
``qrels/<split>.tsv``) and a SQuAD v1.1 JSON file, where each paragraph is a document and each
question's only relevant document is its own paragraph. Every refusal is an
:class:`InputError` whose one-line message names the file and what to do.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pgrag.errors import InputError

BEIR_LAYOUT = "corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
QRELS_HEADER = "query-id"


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str


@dataclass
class RetrievalDataset:
    name: str
    corpus: dict[str, Doc]  # doc id -> Doc, in file order
    queries: dict[str, str]  # query id -> text; only queries that have qrels
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance > 0}


def load_dataset(path: Path, split: str = "test") -> RetrievalDataset:
    """A directory is read as BEIR, a ``*.json`` file as SQuAD; anything else is refused."""
    if path.is_dir():
        return load_beir(path, split)
    if path.is_file() and path.suffix.lower() == ".json":
        return load_squad(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory; pass a BEIR directory or SQuAD .json")
    raise InputError(
        f"{path}: not a dataset; pass a BEIR directory ({BEIR_LAYOUT}) or a SQuAD .json file"
    )


# --- BEIR ---------------------------------------------------------------------------------


def load_beir(path: Path, split: str = "test") -> RetrievalDataset:
    """Read a BEIR dataset directory. Qrels rows with score <= 0 are dropped, queries without
    any remaining qrels are dropped, and qrels naming an unknown document are refused."""
    if not path.is_dir():
        raise InputError(
            f"{path}: not a directory; a BEIR dataset is a directory with {BEIR_LAYOUT}"
        )
    corpus_file = path / "corpus.jsonl"
    queries_file = path / "queries.jsonl"
    qrels_file = path / "qrels" / f"{split}.tsv"
    for required in (corpus_file, queries_file):
        if not required.is_file():
            raise InputError(f"{required}: missing; a BEIR dataset directory holds {BEIR_LAYOUT}")
    if not qrels_file.is_file():
        splits = sorted(p.stem for p in (path / "qrels").glob("*.tsv"))
        have = f" (splits here: {', '.join(splits)})" if splits else ""
        raise InputError(
            f"{qrels_file}: missing{have}; a BEIR dataset directory holds {BEIR_LAYOUT},"
            " so pass an existing split"
        )

    qrels = _read_qrels(qrels_file)
    queries: dict[str, str] = {}
    for lineno, record in _jsonl(queries_file):
        qid = _field_id(record, queries_file, lineno)
        if qid in qrels:
            queries[qid] = _text_field(record, "text", queries_file, lineno)
    missing_queries = [qid for qid in qrels if qid not in queries]
    if missing_queries:
        raise InputError(
            f"{qrels_file}: query id {missing_queries[0]!r} is not in {queries_file.name}"
            f" ({len(missing_queries)} such); fix the qrels or the queries file"
        )
    # Keep the qrels in the queries file's order, like the queries.
    qrels = {qid: qrels[qid] for qid in queries}

    corpus: dict[str, Doc] = {}
    for lineno, record in _jsonl(corpus_file):
        doc_id = _field_id(record, corpus_file, lineno)
        if doc_id in corpus:
            raise InputError(
                f"{corpus_file}:{lineno}: duplicate document id {doc_id!r}; ids must be unique"
            )
        title = _text_field(record, "title", corpus_file, lineno)
        text = _text_field(record, "text", corpus_file, lineno)
        corpus[doc_id] = Doc(id=doc_id, title=title, text=text)

    for judged in qrels.values():
        for doc_id in judged:
            if doc_id not in corpus:
                raise InputError(
                    f"{qrels_file}: corpus id {doc_id!r} is not in {corpus_file.name};"
                    " fix the qrels or use the matching corpus"
                )
    return RetrievalDataset(name=path.name, corpus=corpus, queries=queries, qrels=qrels)


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with _open_text(path) as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            for row in rows:
                lineno = rows.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                if lineno == 1 and row[0].strip() == QRELS_HEADER:
                    continue
                if len(row) != 3:
                    raise InputError(
                        f"{path}:{lineno}: expected 3 tab-separated columns"
                        f" (query-id, corpus-id, score), got {len(row)}; fix this row"
                    )
                qid, doc_id, raw_score = (cell.strip() for cell in row)
                try:
                    score = int(raw_score)
                except ValueError:
                    raise InputError(
                        f"{path}:{lineno}: score {raw_score!r} is not an integer; fix this row"
                    ) from None
                if score > 0:
                    qrels.setdefault(qid, {})[doc_id] = score
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text ({err.reason}); re-encode it") from None
    return qrels


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line, reading one line at a time."""
    with _open_text(path) as handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise InputError(
                        f"{path}:{lineno}: invalid JSON ({err.msg}); fix or remove this line"
                    ) from None
                if not isinstance(record, dict):
                    raise InputError(
                        f"{path}:{lineno}: expected a JSON object per line; fix this line"
                    )
                yield lineno, record
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text ({err.reason}); re-encode it") from None


def _open_text(path: Path) -> TextIO:
    try:
        return path.open(encoding="utf-8", newline="")
    except OSError as err:
        raise InputError(f"{path}: cannot read this file ({err.strerror})") from None


def _field_id(record: dict[str, Any], path: Path, lineno: int) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise InputError(f'{path}:{lineno}: missing or empty "_id"; every line needs an id')
    return str(value)


def _text_field(record: dict[str, Any], key: str, path: Path, lineno: int) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f'{path}:{lineno}: "{key}" must be a string; fix this line')
    return value


# --- SQuAD --------------------------------------------------------------------------------


def load_squad(path: Path) -> RetrievalDataset:
    """Read a SQuAD v1.1 file: each paragraph is a document with id
    ``"<article index>-<paragraph index>"`` and each question's relevant document is its own
    paragraph. Questions marked ``is_impossible`` (SQuAD 2.0) have no answer there and are
    skipped."""
    return load_squad_answers(path).retrieval


@dataclass(frozen=True)
class AnswerDataset:
    """A SQuAD-style dataset: the retrieval view (paragraphs, questions, each question's
    paragraph) and each question's accepted answers."""

    retrieval: RetrievalDataset
    answers: dict[str, list[str]]


def load_squad_answers(path: Path) -> AnswerDataset:
    """:func:`load_squad`, keeping each question's accepted answers (``answers[].text``;
    possibly none, and then the question cannot be scored for exact match)."""
    if not path.is_file():
        raise InputError(f"{path}: no such file; pass a SQuAD v1.1 .json file")
    try:
        with path.open(encoding="utf-8") as handle:
            payload = json.load(handle)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path}:{err.lineno}: invalid JSON ({err.msg}); pass a SQuAD v1.1 .json file"
        ) from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason}); re-encode it") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read this file ({err.strerror})") from None

    articles = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(articles, list):
        raise InputError(f'{path}: no "data" list; pass a SQuAD v1.1 .json file')

    corpus: dict[str, Doc] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    answers: dict[str, list[str]] = {}
    for a, article in enumerate(articles):
        where = f"data[{a}]"
        if not isinstance(article, dict):
            raise InputError(f"{path}: {where} is not an object; pass a SQuAD v1.1 .json file")
        title = _squad_str(article.get("title", ""), path, f"{where}.title").replace("_", " ")
        paragraphs = article.get("paragraphs", [])
        if not isinstance(paragraphs, list):
            raise InputError(f"{path}: {where}.paragraphs is not a list; fix the file")
        for p, paragraph in enumerate(paragraphs):
            pwhere = f"{where}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise InputError(f"{path}: {pwhere} is not an object; fix the file")
            doc_id = f"{a}-{p}"
            context = _squad_str(paragraph.get("context"), path, f"{pwhere}.context")
            corpus[doc_id] = Doc(id=doc_id, title=title, text=context)
            qas = paragraph.get("qas", [])
            if not isinstance(qas, list):
                raise InputError(f"{path}: {pwhere}.qas is not a list; fix the file")
            for q, qa in enumerate(qas):
                qwhere = f"{pwhere}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise InputError(f"{path}: {qwhere} is not an object; fix the file")
                if qa.get("is_impossible") is True:
                    continue
                raw_id = qa.get("id")
                if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or raw_id == "":
                    raise InputError(f"{path}: {qwhere}.id is missing or empty; fix the file")
                qid = str(raw_id)
                if qid in queries:
                    raise InputError(f"{path}: {qwhere}: duplicate question id {qid!r}; fix it")
                queries[qid] = _squad_str(qa.get("question"), path, f"{qwhere}.question")
                qrels[qid] = {doc_id: 1}
                given = qa.get("answers", [])
                if not isinstance(given, list):
                    raise InputError(f"{path}: {qwhere}.answers is not a list; fix the file")
                answers[qid] = [
                    _squad_str(
                        g.get("text") if isinstance(g, dict) else None,
                        path,
                        f"{qwhere}.answers[{i}].text",
                    )
                    for i, g in enumerate(given)
                ]
    return AnswerDataset(
        retrieval=RetrievalDataset(name=path.stem, corpus=corpus, queries=queries, qrels=qrels),
        answers=answers,
    )


def _squad_str(value: object, path: Path, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{path}: {where} is missing or not a string; fix the file")
    return value


# --- sampling -----------------------------------------------------------------------------


def sample_queries(ds: RetrievalDataset, n: int | None, seed: int = 0) -> RetrievalDataset:
    """A deterministic subset of ``n`` queries (with their qrels), keeping the whole corpus.
    The same dataset, ``n`` and ``seed`` always give the same queries, whatever the file order.
    ``n`` of None or at least the number of queries returns ``ds`` unchanged."""
    if n is None or n >= len(ds.queries):
        return ds
    if n < 1:
        raise InputError(f"the number of queries to sample must be at least 1, got {n}")
    chosen = set(random.Random(seed).sample(sorted(ds.queries), n))
    return RetrievalDataset(
        name=ds.name,
        corpus=ds.corpus,
        queries={qid: text for qid, text in ds.queries.items() if qid in chosen},
        qrels={qid: judged for qid, judged in ds.qrels.items() if qid in chosen},
    )
