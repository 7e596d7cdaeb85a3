"""Fusion in search_v5 against its Python reference (pgrag.retrieval.fusion), the collection's
fusion setting, and `pgrag tune`, on the real model and a real PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, DatabaseError, InputError
from pgrag.ingest.loaders import from_text
from pgrag.llm.chat import ChatClient, LLMConfig
from pgrag.retrieval import fusion, tuning
from tests.fakes import LLMServer

QUERIES = [
    "refund monthly subscription",
    "Lisbon credentials minimum length",
    "two-factor login requirement",
    "how long do annual plan refunds take",
    "office hours",
]


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    report = pgrag.ingest(db, [corpus], collection="docs")
    assert not report.failed and report.chunks_written > 0
    return db


def _hybrid(
    db: Database, query: str, vector: Any, k: int = 5, **args: Any
) -> list[tuple[int, float]]:
    named = "".join(f", {name} => %({name})s" for name in args)
    rows = db.conn.execute(
        f"SELECT chunk_id, score FROM pgrag.search_v5('docs', %(q)s, %(v)s, k => %(k)s{named})",  # noqa: S608 - names are this file's
        {"q": query, "v": vector, "k": k, **args},
    ).fetchall()
    db.conn.commit()
    return [(int(c), float(s)) for c, s in rows]


def _reference(db: Database, k: int = 5) -> list[tuple[str, Any, tuple[Any, Any]]]:
    vectors = configured_embedder(db).embed(QUERIES)
    depth = max(4 * k, 40)  # what search_v5 fuses
    lists = tuning.arm_lists(db, "docs", QUERIES, vectors, depth=depth)
    return list(zip(QUERIES, vectors, lists, strict=True))


def _same(sql_rows: list[tuple[int, float]], python: list[tuple[int, float]]) -> None:
    assert [c for c, _ in sql_rows] == [c for c, _ in python]
    assert [s for _, s in sql_rows] == pytest.approx([s for _, s in python], abs=1e-9)


def test_default_fusion_is_the_convex_z_score_reference(loaded: Database) -> None:
    for query, vector, (kw, vec) in _reference(loaded):
        assert kw and vec, query
        expected = fusion.fuse(kw, vec, "convex-z", alpha=tuning.DEFAULT_VECTOR_WEIGHT)[:5]
        _same(_hybrid(loaded, query, vector), expected)


def test_rrf_when_the_caller_names_rrf_k(loaded: Database) -> None:
    for query, vector, (kw, vec) in _reference(loaded):
        expected = fusion.fuse(kw, vec, "rrf", rrf_k=5, vector_weight=0.5, keyword_weight=1.0)
        _same(_hybrid(loaded, query, vector, rrf_k=5), expected[:5])
        expected = fusion.fuse(kw, vec, "rrf", rrf_k=20, vector_weight=2.0, keyword_weight=1.0)
        _same(_hybrid(loaded, query, vector, rrf_k=20, vector_weight=2.0), expected[:5])


def _set_fusion(db: Database, value: Any) -> None:
    db.conn.execute(
        "UPDATE pgrag.collections"
        " SET settings = settings || jsonb_build_object('fusion', %s::jsonb) WHERE name = 'docs'",
        (Jsonb(value),),
    )
    db.conn.commit()


def test_the_collections_fusion_setting_is_used_and_the_caller_overrides_it(
    loaded: Database,
) -> None:
    reference = _reference(loaded)
    _set_fusion(loaded, {"method": "convex", "vector_weight": 0.9, "keyword_weight": 0.1})
    for query, vector, (kw, vec) in reference:
        _same(_hybrid(loaded, query, vector), fusion.fuse(kw, vec, "convex-z", alpha=0.9)[:5])
        # the caller's weights win over the collection's
        _same(
            _hybrid(loaded, query, vector, vector_weight=0.2, keyword_weight=0.8),
            fusion.fuse(kw, vec, "convex-z", alpha=0.2)[:5],
        )
        # rrf_k chooses RRF, and then the collection's convex weights do not apply
        _same(_hybrid(loaded, query, vector, rrf_k=5), fusion.fuse(kw, vec, "rrf")[:5])
    # min-max normalisation (each list's scores from 0 to 1; absent: 0)
    _set_fusion(loaded, {"normalization": "minmax", "vector_weight": 0.3, "keyword_weight": 0.7})
    for query, vector, (kw, vec) in reference:
        _same(_hybrid(loaded, query, vector), fusion.fuse(kw, vec, "convex-mm", alpha=0.3)[:5])
    # one arm asked for: a weight of 0 in the setting does not switch it off
    _set_fusion(loaded, {"method": "convex", "vector_weight": 1.0, "keyword_weight": 0.0})
    keyword = pgrag.search(loaded, "refund monthly", collection="docs", mode="keyword")
    assert keyword and keyword[0].keyword_rank == 1
    _set_fusion(loaded, {"method": "convex", "vector_weight": 0.0, "keyword_weight": 1.0})
    assert pgrag.search(loaded, "refund monthly", collection="docs", mode="vector")
    _set_fusion(loaded, {"method": "rrf", "rrf_k": 10, "vector_weight": 1.0})
    for query, vector, (kw, vec) in reference:
        expected = fusion.fuse(kw, vec, "rrf", rrf_k=10, vector_weight=1.0, keyword_weight=1.0)
        _same(_hybrid(loaded, query, vector), expected[:5])


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"method": "bm25"}, '"method" must be "convex" or "rrf", got "bm25"'),
        ({"normalization": "softmax"}, '"normalization" must be "zscore" or "minmax"'),
        ({"vector_weight": "heavy"}, '"vector_weight" must be a number from 0 to 1000000'),
        ({"temperature": None}, '"temperature" must be a number from 1e-300'),
        ({"vector_weight": 1e300}, '"vector_weight" must be a number from 0 to 1000000'),
        ({"keyword_weight": -1}, '"keyword_weight" must be a number from 0 to 1000000, got -1'),
        ({"rrf_k": 2.5}, '"rrf_k" must be a whole number from 1 to 1000000, got 2.5'),
        ({"rrf_k": 10**12}, '"rrf_k" must be a whole number'),
        ({"temperature": 0}, '"temperature" must be a number from 1e-300'),
        ({"vector_weight": 0, "keyword_weight": 0}, "both 0, which switches off both arms"),
        ("convex", "it is not a JSON object"),
        ([1, 2], "it is not a JSON object"),
    ],
)
def test_a_bad_fusion_setting_is_a_clear_error(loaded: Database, value: Any, reason: str) -> None:
    _set_fusion(loaded, value)
    for sql_text in (
        "SELECT * FROM pgrag.search_v5('docs', 'refund')",
        "SELECT * FROM pgrag.search_v5('docs', 'refund', vector_weight => 1)",
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            loaded.conn.execute(sql_text).fetchall()
        loaded.conn.rollback()
        message = caught.value.diag.message_primary or ""
        assert message.startswith("the fusion setting of collection 'docs' is not valid: ")
        assert reason in message
    # a caller naming every knob does not need the setting
    rows = loaded.conn.execute(
        "SELECT * FROM pgrag.search_v5('docs', 'refund', rrf_k => 5, vector_weight => 0.5,"
        " keyword_weight => 1, temperature => 0.02)"
    ).fetchall()
    assert rows


def test_a_huge_number_in_the_setting_is_named_not_a_raw_overflow(loaded: Database) -> None:
    # JSON numbers beyond double precision (1e400) are valid jsonb: named, not cast
    loaded.conn.execute(
        "UPDATE pgrag.collections SET settings = settings"
        " || '{\"fusion\": {\"vector_weight\": 1e400}}'::jsonb WHERE name = 'docs'"
    )
    loaded.conn.commit()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='"vector_weight" must be'):
        loaded.conn.execute("SELECT * FROM pgrag.search_v5('docs', 'refund')").fetchall()
    loaded.conn.rollback()


def test_keyword_only_scores_are_normalised_and_probabilities_sum_to_one(loaded: Database) -> None:
    results = pgrag.search(
        loaded, "refund monthly subscription annual", collection="docs", mode="keyword"
    )
    assert len(results) >= 2
    # z-scores with the statistics of the arm's first 40 candidates, whatever k is
    head = [
        r.keyword_score or 0.0
        for r in pgrag.search(
            loaded, "refund monthly subscription annual", collection="docs", mode="keyword", k=40
        )
    ]
    head += [0.0] * (40 - len(head))  # (fewer than 40 matches: the rest score BM25 0)
    mean = sum(head) / 40
    sd = (sum((b - mean) ** 2 for b in head) / 40) ** 0.5
    want = [((r.keyword_score or 0.0) - mean) / sd for r in results]
    assert [r.score for r in results] == pytest.approx(want)
    two = pgrag.search(
        loaded, "refund monthly subscription annual", collection="docs", mode="keyword", k=2
    )
    assert [r.score for r in two] == pytest.approx(want[:2])
    assert sum(r.probability or 0 for r in results) == pytest.approx(1.0)
    # the deprecated entry points keep RRF at their own defaults
    rows = loaded.conn.execute(
        "SELECT score, keyword_rank"
        " FROM pgrag.search_v4('docs', 'refund monthly subscription annual')"
    ).fetchall()
    loaded.conn.rollback()
    assert [s for s, _ in rows] == pytest.approx([1.0 / (5 + r) for _, r in rows])


TOPICS = [
    ("glaciers", "Glaciers carve valleys as the ice moves slowly downhill under its own weight"),
    ("bread", "Sourdough bread rises because wild yeast and bacteria ferment the flour"),
    ("tides", "Ocean tides follow the pull of the moon and, to a lesser degree, the sun"),
    ("bees", "Honey bees tell each other where flowers are with a waggle dance in the hive"),
    ("volcanoes", "Volcanoes erupt when pressure from molten rock and gas breaks the crust"),
    ("compilers", "A compiler translates source code into machine instructions before it runs"),
    ("violins", "Violin strings vibrate and the hollow wooden body makes the sound louder"),
    ("rivers", "Rivers deposit sand and silt at their mouths and build deltas over centuries"),
]


def _tune_corpus(db: Database) -> None:
    docs = []
    for i in range(48):
        name, sentence = TOPICS[i % len(TOPICS)]
        text = (
            f"# Note {i} on {name}\n\n{sentence}, as note number {i} explains in detail. "
            f"Observers in region {i} recorded this pattern for {i + 3} years without a break. "
            f"The second remark of note {i} adds that {name} were studied by team {i % 5}. "
            f"Its catalogue mark is qx{i}z{i * 7}."
        )
        docs.append(from_text(f"note-{i}.md", text))
    report = pgrag.ingest_documents(db, docs, collection="docs")
    assert not report.failed


def test_statistics_come_from_the_first_40_candidates(db: Database) -> None:
    # 48 chunks: asked for 60 results, each arm's list is longer than 40, and the statistics of
    # its first 40 normalise it (in SQL as in the Python reference), for z-scores and min-max.
    _tune_corpus(db)
    query = "which team of observers recorded the yeast pattern for note 7 over the years"
    vector = configured_embedder(db).embed([query])[0]
    ((kw, vec),) = tuning.arm_lists(db, "docs", [query], [vector], depth=240)
    assert len(kw) > 40 and len(vec) > 40
    _same(_hybrid(db, query, vector, k=60), fusion.fuse(kw, vec, "convex-z", alpha=0.4)[:60])
    _set_fusion(db, {"normalization": "minmax"})
    _same(_hybrid(db, query, vector, k=60), fusion.fuse(kw, vec, "convex-mm", alpha=0.4)[:60])
    # and so the first results of a long list are those of a short one, with the same scores
    for normalization in ("minmax", "zscore"):
        _set_fusion(db, {"normalization": normalization})
        _same(_hybrid(db, query, vector, k=60)[:5], _hybrid(db, query, vector, k=5))


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = LLMServer()
    yield server
    server.close()


def _note_question(body: dict[str, Any]) -> str:
    """A question about the passage in the prompt that names its catalogue mark: a word only
    that note has (the keyword arm finds it; the vector arm hardly tells the notes apart)."""
    prompt = body["messages"][-1]["content"]
    match = re.search(r"catalogue mark is (qx\d+z\d+)", prompt)
    assert match, prompt
    return f"Which note carries the catalogue mark {match.group(1)}?"


def _setting(db: Database) -> Any:
    row = db.conn.execute("SELECT settings FROM pgrag.collections WHERE name = 'docs'").fetchone()
    db.conn.commit()
    return row[0].get("fusion")


def test_tune_records_a_clearly_better_weight_that_search_then_uses(
    db: Database, llm: LLMServer
) -> None:
    _tune_corpus(db)
    llm.answer = _note_question
    client = ChatClient(LLMConfig(base_url=llm.url, model="m"))
    # A collection set to the vector arm alone, for questions only keywords answer: the best
    # weight is far lower, and clearly better.
    _set_fusion(db, {"method": "convex", "vector_weight": 1.0, "keyword_weight": 0.0})
    dry = tuning.tune_collection(db, "docs", questions=30, client=client, save=False)
    assert dry.questions == 30 and dry.current_weight == 1.0 and not dry.saved
    assert set(dry.ndcg) == set(tuning.GRID)
    assert dry.ndcg[dry.best_weight] == max(dry.ndcg.values())
    assert dry.best_weight < 1.0 and dry.gain >= 0.01 and dry.gain_low > 0 and not dry.reason
    assert _setting(db)["vector_weight"] == 1.0  # a dry run records nothing
    assert all(q.startswith("Which note carries") for q in dry.examples)

    report = tuning.tune_collection(db, "docs", questions=30, client=client)
    assert report.saved
    # halfway from the current weight toward the best, to a step of 0.05, within [0.05, 0.95]
    halfway = round((1.0 + report.best_weight) / 2 * 20) / 20
    assert report.vector_weight == pytest.approx(min(max(halfway, 0.05), 0.95))
    # a partial setting is completed as search_v5 completes it: 0.9 with the default 0.6
    _set_fusion(db, {"vector_weight": 0.9})
    partial = tuning.tune_collection(db, "docs", questions=20, client=client, save=False)
    assert partial.current_weight == pytest.approx(0.6)
    _set_fusion(db, {"method": "convex", "vector_weight": 1.0, "keyword_weight": 0.0})
    report = tuning.tune_collection(db, "docs", questions=30, client=client)
    fusion_setting = _setting(db)
    assert fusion_setting["method"] == "convex"
    assert fusion_setting["vector_weight"] == report.vector_weight
    assert fusion_setting["tuned"]["questions"] == 30
    query = "Which note carries the catalogue mark qx7z49?"
    vector = configured_embedder(db).embed([query])[0]
    ((kw, vec),) = tuning.arm_lists(db, "docs", [query], [vector], depth=40)
    expected = fusion.fuse(kw, vec, "convex-z", alpha=report.vector_weight)[:5]
    _same(_hybrid(db, query, vector), expected)


def test_tune_changes_nothing_without_a_clear_gain(db: Database, llm: LLMServer) -> None:
    _tune_corpus(db)
    llm.answer = _note_question
    client = ChatClient(LLMConfig(base_url=llm.url, model="m"))
    # A weight already near the best: whatever the sample's best, the gain is under 0.01.
    _set_fusion(db, {"method": "convex", "vector_weight": 0.0, "keyword_weight": 1.0})
    report = tuning.tune_collection(db, "docs", questions=25, client=client)
    assert report.current_ndcg == pytest.approx(report.ndcg[0.0])
    if report.gain < 0.01 or report.gain_low <= 0:
        assert not report.saved and "needs at least +0.01" in report.reason
        assert _setting(db)["vector_weight"] == 0.0
    else:  # (the keyword arm alone lost clearly: then it must have been recorded)
        assert report.saved and _setting(db)["vector_weight"] == report.vector_weight


def test_tune_refuses_what_it_cannot_tune(
    db: Database, admin_dsn: str, llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ChatClient(LLMConfig(base_url=llm.url, model="m"))
    with pytest.raises(pgrag.errors.CollectionNotFound):
        tuning.tune_collection(db, "nothing-here", client=client)
    _tune_corpus(db)
    # no model configured: one line saying which variables to set
    with pytest.raises(ConfigError, match="PGRAG_LLM_GGUF .* or PGRAG_LLM_BASE_URL"):
        tuning.tune_collection(db, "docs")
    # a collection fusing with RRF, or with a setting search_v5 refuses: said before any question
    _set_fusion(db, {"method": "rrf"})
    with pytest.raises(InputError, match="fuses with RRF"):
        tuning.tune_collection(db, "docs", client=client)
    _set_fusion(db, {"vector_weight": 1e300})
    with pytest.raises(DatabaseError, match="pgrag tune: the fusion setting of collection"):
        tuning.tune_collection(db, "docs", client=client)
    assert not llm.requests
    _set_fusion(db, {"vector_weight": 0.4})
    # a model that writes no usable question (no question mark)
    llm.reply = "Glaciers carve valleys."
    with pytest.raises(InputError, match="usable questions"):
        tuning.tune_collection(db, "docs", questions=20, client=client)
    # a reader may search but not tune: PostgreSQL says no, pgrag says why in one line
    role = f"tune_reader_{db.conn.info.dbname[-8:]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(role)))
    try:
        reader = pgrag.connect(make_conninfo(db.dsn, user=role))
        try:
            with pytest.raises(DatabaseError, match="pgrag tune needs a role"):
                tuning.tune_collection(reader, "docs", client=client)
        finally:
            reader.close()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_pgrag_tune_command(db: Database, llm: LLMServer) -> None:
    _tune_corpus(db)
    llm.answer = _note_question
    _set_fusion(db, {"method": "convex", "vector_weight": 1.0, "keyword_weight": 0.0})
    args = ["--dsn", db.dsn, "tune", "-c", "docs", "--questions", "25"]
    result = CliRunner().invoke(cli, [*args, "--dry-run", "--json"], env=llm.env)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["saved"] is False and report["questions"] == 25
    assert "writing questions: 25/25" in result.stderr
    result = CliRunner().invoke(cli, args, env=llm.env)
    assert result.exit_code == 0, result.stderr
    assert "recorded: vector weight" in result.stdout
    assert _setting(db)["vector_weight"] < 1.0
    result = CliRunner().invoke(cli, ["--dsn", db.dsn, "tune", "-c", "missing"], env=llm.env)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: collection 'missing'")
    result = CliRunner().invoke(
        cli, ["--dsn", db.dsn, "tune", "-c", "docs"], env={"PGRAG_LLM_BASE_URL": None}
    )
    assert result.exit_code == 1 and "needs a language model" in result.stderr


def test_vector_only_search_agrees_with_the_general_path(loaded: Database) -> None:
    """A vector-only, unfiltered search by an unrestricted caller has steps of its own (the
    lean vector statement); a filter every document passes takes the general path: the same
    rows and numbers, at every fusion, depth and k, and with a second collection on the
    same model (whose chunks the lean steps must then leave out)."""
    loaded.conn.execute("UPDATE pgrag.documents SET metadata = metadata || '{\"all\": true}'")
    loaded.conn.commit()
    columns = (
        "rank, score, chunk_id, document_id, source, title, section, text, vector_rank,"
        " keyword_rank, vector_distance, keyword_score, metadata, probability"
    )
    vectors = configured_embedder(loaded).embed(QUERIES)

    def both(vector: Any, extra: str) -> tuple[list[Any], list[Any]]:
        lean = loaded.conn.execute(
            f"SELECT {columns} FROM pgrag.search_v5('docs', NULL, %s{extra})",  # noqa: S608 - fixed
            (vector,),
        ).fetchall()
        general = loaded.conn.execute(
            f"SELECT {columns} FROM pgrag.search_v5('docs', NULL, %s{extra},"  # noqa: S608 - fixed
            " filter => '{\"all\": true}')",
            (vector,),
        ).fetchall()
        loaded.conn.commit()
        return lean, general

    def check(extra: str) -> None:
        for vector in vectors:
            lean, general = both(vector, extra)
            assert lean and len(lean) == len(general), extra
            for a, b in zip(lean, general, strict=True):
                assert a[0] == b[0] and a[2:11] == b[2:11] and a[12] == b[12], extra
                assert a[1] == pytest.approx(b[1], abs=1e-12), extra
                assert a[11] is None and b[11] is None
                assert a[13] == pytest.approx(b[13], abs=1e-12), extra

    calls = ("", ", k => 3", ", k => 50", ", k => 3, vector_depth => 5", ", rrf_k => 5")
    for extra in calls:
        check(extra)
    _set_fusion(loaded, {"normalization": "minmax"})
    check("")
    _set_fusion(loaded, {"method": "rrf", "rrf_k": 10})
    check(", k => 7")
    # Another collection on the same model: its chunks are near the queries too.
    report = pgrag.ingest_documents(
        loaded,
        [from_text(f"other-{i}.md", f"# Refunds\n\n{q}. {q}.") for i, q in enumerate(QUERIES)],
        collection="other",
    )
    assert report.chunks_written == len(QUERIES)
    for extra in calls:
        check(extra)
    sources = {
        r[0]
        for v in vectors
        for r in loaded.conn.execute(
            "SELECT source FROM pgrag.search_v5('docs', NULL, %s, k => 50)", (v,)
        ).fetchall()
    }
    assert sources and not any(s.startswith("other-") for s in sources)


def test_what_the_lean_vector_steps_leave_to_the_general_path(loaded: Database) -> None:
    """Found by review: a NULL k, a vector whose norm sits at a bound the general path checks
    in single precision, and a bad time-limit setting are the general path's to refuse, in
    the lean steps' case as in a filtered search's."""
    conn = loaded.conn
    one = "(SELECT embedding FROM pgrag.chunk_embeddings LIMIT 1)"
    cases = {
        f"{one}, k => NULL": "k must be between 1 and 1000",
        f"{one}, k => NULL, vector_depth => 10000": "k must be between 1 and 1000",
        # norm 9.9999982e14, squared length 1.00000017e30 in single precision
        "array_fill(51031027220480::real, ARRAY[384])::vector": "single precision",
        # norm 1.00000006e-15, squared length 9.99998e-31 in single precision
        "(array_fill(2.499997891486366e-16::real, ARRAY[16])"
        " || array_fill(7e-20::real, ARRAY[368]))::vector": "single precision",
    }
    for args, message in cases.items():
        for extra in ("", ', filter => \'{"$not": {"zz": 1}}\''):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
                conn.execute(f"SELECT * FROM pgrag.search_v5('docs', NULL, {args}{extra})")  # noqa: S608 - fixed cases
            conn.rollback()
    # A bad time limit fails every search, lean (vector or keyword) or not.
    vector = conn.execute("SELECT embedding FROM pgrag.chunk_embeddings LIMIT 1").fetchone()[0]
    for setting in ("soon", "-5s"):
        for where in ("session", "collection"):
            if where == "session":
                conn.execute("SELECT set_config('pgrag.search_timeout', %s, false)", (setting,))
            else:
                conn.execute(
                    "UPDATE pgrag.collections SET settings = settings"
                    " || jsonb_build_object('search_timeout', %s::text) WHERE name = 'docs'",
                    (setting,),
                )
            conn.commit()
            for query, vec in (("refund", None), (None, vector), ("refund", vector)):
                with pytest.raises(psycopg.errors.InvalidParameterValue, match="search_timeout"):
                    conn.execute(
                        "SELECT * FROM pgrag.search_v5('docs', %s, %s)", (query, vec)
                    ).fetchall()
                conn.rollback()
            conn.execute("SELECT set_config('pgrag.search_timeout', '', false)")
            conn.execute(
                "UPDATE pgrag.collections SET settings = settings - 'search_timeout'"
                " WHERE name = 'docs'"
            )
            conn.commit()
    # Good settings, as milliseconds or a duration, leave the lean steps to answer.
    plain = conn.execute("SELECT * FROM pgrag.search_v5('docs', NULL, %s)", (vector,)).fetchall()
    words = conn.execute("SELECT * FROM pgrag.search_v5('docs', 'refund')").fetchall()
    assert plain and words
    for setting in ("10s", "2500"):
        conn.execute("SELECT set_config('pgrag.search_timeout', %s, false)", (setting,))
        assert (
            conn.execute("SELECT * FROM pgrag.search_v5('docs', NULL, %s)", (vector,)).fetchall()
            == plain
        )
        assert conn.execute("SELECT * FROM pgrag.search_v5('docs', 'refund')").fetchall() == words
    conn.rollback()
