"""How fast the keyword arm could be in SQL: search_v5 against its own BM25 statement alone.

Issue 19 (item 2) asks for a keyword arm at least as fast as bm25s at k = 100, one query at a
time, tokenisation included. `pgrag eval retrieval` measures ``search_v5``'s keyword arm, which
returns ranked rows (text, source, title, metadata). This script asks what is left once all of
that is taken away: the same queries, one at a time, taking turns a block of 100 at a time,

- **search_v5**: ``SELECT metadata ->> 'doc_id' FROM pgrag.search_v5(collection, query, NULL,
  k)``, as `pgrag eval retrieval` calls it;
- **statement**: the BM25 that search_v5's lean keyword path runs (the query's terms and
  their idf from the collection's statistics, every posting of each term summed per chunk, the
  best k), as one prepared statement returning chunk ids and scores, nothing else: the
  floor for an SQL keyword arm over pgrag's tables, whatever function wraps it;
- **bm25s**: as `pgrag eval retrieval` runs it (query tokenised with its stemmer and stop
  words, one thread).

It also checks that the statement ranks the same chunks as search_v5 (the share of queries
whose top k agree exactly), so the floor is for the same results.

The collection must exist: run ``pgrag eval retrieval DATASET --arm keyword`` first (it
builds ``eval-<name>``), for example on the CMake manual set of docs/benchmarks.md:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/build_docs_set.py cmake \\
        --out ~/.cache/pgrag-bench/cmake-fragments --fragments 500
    .venv/bin/pgrag eval retrieval ~/.cache/pgrag-bench/cmake-fragments --arm keyword
    PYTHONPATH=$PWD .venv/bin/python benchmarks/keyword_floor.py \\
        ~/.cache/pgrag-bench/cmake-fragments
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench import log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.evaluation.datasets import load_dataset  # noqa: E402
from pgrag.evaluation.retrieval import _bm25s_searcher, collection_name  # noqa: E402

BLOCK = 100

SEARCH_V5 = "SELECT metadata ->> 'doc_id' FROM pgrag.search_v5(%(c)s, %(q)s, NULL, %(k)s)"
SEARCH_V5_IDS = "SELECT chunk_id FROM pgrag.search_v5(%(c)s, %(q)s, NULL, %(k)s)"
# search_v5's lean keyword statement (sql/functions/search.sql), its ranked ids and scores only.
STATEMENT = """
WITH terms AS MATERIALIZED (
         SELECT x.lexeme, ln(1 + (st.n - x.df + 0.5) / (x.df + 0.5)) AS idf
           FROM (SELECT sum(t.chunks)::float8 AS n
                   FROM pgrag.keyword_totals t WHERE t.collection_id = %(cid)s) st,
                unnest(to_tsvector(%(config)s::regconfig, %(q)s)) u,
                LATERAL (SELECT u.lexeme COLLATE "C" AS lexeme, sum(d.df)::float8 AS df
                           FROM pgrag.keyword_df d
                          WHERE d.collection_id = %(cid)s AND d.lexeme = u.lexeme COLLATE "C") x
          WHERE x.df > 0)
SELECT p.chunk_id, sum(t.idf * p.impact) AS s
  FROM terms t
  JOIN pgrag.keyword_postings p ON p.collection_id = %(cid)s AND p.lexeme = t.lexeme
 GROUP BY p.chunk_id
 ORDER BY s DESC, p.chunk_id
 LIMIT %(k)s
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a BEIR directory or SQuAD file")
    parser.add_argument("--collection", help="default: eval-<dataset name>")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--k", type=int, nargs="+", default=[100, 40, 10])
    args = parser.parse_args()

    dataset = load_dataset(args.dataset)
    collection = args.collection or collection_name(dataset)
    db = pgrag.connect()
    db.conn.autocommit = True
    found = db.conn.execute(
        "SELECT id, text_config FROM pgrag.collections WHERE name = %s", (collection,)
    ).fetchone()
    if found is None:
        raise SystemExit(
            f"keyword_floor: no collection {collection!r}; run"
            f" `pgrag eval retrieval {args.dataset} --arm keyword` first"
        )
    cid, config = found
    qids = sorted(dataset.queries)[: args.queries]
    texts = [dataset.queries[q] for q in qids]
    bm25s = _bm25s_searcher(dataset, texts)
    cur = db.conn.cursor()

    def params(i: int, k: int) -> dict[str, Any]:
        return {"c": collection, "cid": cid, "config": config, "q": texts[i], "k": k}

    def via_search_v5(i: int, k: int) -> int:
        return len(cur.execute(SEARCH_V5, params(i, k), prepare=True).fetchall())

    def via_statement(i: int, k: int) -> int:
        return len(cur.execute(STATEMENT, params(i, k), prepare=True).fetchall())

    def via_bm25s(i: int, k: int) -> int:
        return len(bm25s(i, k))

    sides: dict[str, Callable[[int, int], int]] = {
        "search_v5": via_search_v5,
        "statement": via_statement,
        "bm25s": via_bm25s,
    }
    report: dict[str, Any] = {"collection": collection, "queries": len(texts)}
    for k in args.k:
        agree = sum(
            [r[0] for r in cur.execute(SEARCH_V5_IDS, params(i, k)).fetchall()]
            == [r[0] for r in cur.execute(STATEMENT, params(i, k)).fetchall()]
            for i in range(len(texts))
        )
        times: dict[str, list[float]] = {side: [] for side in sides}
        for start in range(0, len(texts), BLOCK):
            for side, run in sides.items():
                for i in range(start, min(start + BLOCK, len(texts))):
                    t = time.perf_counter()
                    run(i, k)
                    times[side].append(time.perf_counter() - t)
        qps = {side: len(t) / sum(t) for side, t in times.items()}
        report[f"k={k}"] = {
            "same top k (statement vs search_v5)": f"{agree}/{len(texts)}",
            **{
                side: {
                    "p50 ms": round(statistics.median(t) * 1000, 3),
                    "q/s": round(qps[side]),
                    "q/s / bm25s": round(qps[side] / qps["bm25s"], 3),
                }
                for side, t in times.items()
            },
        }
        log(f"k={k}: {report[f'k={k}']}")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
