"""What stands between pgrag's schema and Citus, asked of a real Citus coordinator.

Run `pgrag db upgrade` against the coordinator first (pgrag installs there as ordinary local
tables), then:

    python benchmarks/citus_probe.py "postgresql://postgres@coordinator/postgres"

For each of pgrag's tables it tries what distributing the schema by collection would do
(reference tables for the small shared ones, ``create_distributed_table(..., 'collection_id')``
for the rest), each in a savepoint that is rolled back, and prints the server's answer. Six
rounds, each removing what stopped the one before: the schema as shipped; with
``citus.enable_unsafe_triggers``; with the row-level security policies rewritten without their
``(SELECT f())`` wrappers, which Citus refuses as subqueries; with the two policies that are
EXISTS subqueries dropped; with documents' and chunks' identity columns made plain sequence
defaults; and with primary, unique and foreign keys that carry collection_id. Nothing is kept.

    python benchmarks/citus_probe.py --write "postgresql://postgres@coordinator/probe"

keeps the last round (the schema stays distributed: give it a database of its own, upgraded by
`pgrag db upgrade` and holding no collection), then writes what an ingest writes first (a
model, a collection, a document, a chunk), each committed, four ways: as shipped, with
``citus.allow_nested_distributed_execution``, with that and collection_models' trigger
taking no now() in ON CONFLICT, and with that and collections' triggers replaced by the
writer's own statements (then a vector too, and the collection searched, keyword and hybrid,
through search_v5 with its joins carrying collection_id). docs/scale.md#citus has the results
on Citus 12.1.12, PostgreSQL 15, pgvector 0.8.0.
"""

from __future__ import annotations

import sys

import psycopg

REFERENCE = (
    "collections",
    "acls",
    "embedding_models",
    "collection_models",
    "keyword_settings",
    "role_principals",
)
DISTRIBUTED = (
    "documents",
    "chunks",
    "chunk_embeddings",
    "keyword_postings",
    "keyword_df",
    "keyword_totals",
    "embedding_queue",
)
ROUNDS = (
    "as shipped",
    "unsafe triggers allowed",
    "policies without initplans",
    "and no EXISTS policies",
    "and ids from sequences",
    "and keys with collection_id",
)
# Round 6's keys: (table, constraint, its replacement). Citus requires every primary and unique
# key of a distributed table to contain its distribution column, and a foreign key between two
# of them to join on it; ON UPDATE CASCADE on such a key is refused (the distribution column
# cannot change), so a chunk's document and parent become (id, collection_id) pairs.
KEYS = (
    ("documents", "documents_pkey", "PRIMARY KEY (id, collection_id)"),
    ("chunks", "chunks_pkey", "PRIMARY KEY (id, collection_id)"),
    ("chunks", "chunks_document_id_ordinal_key", "UNIQUE (document_id, ordinal, collection_id)"),
    ("embedding_queue", "embedding_queue_pkey", "PRIMARY KEY (chunk_id, model_id, collection_id)"),
)
FOREIGN_KEYS = (
    (
        "chunks",
        "chunks_document_id_fkey",
        "FOREIGN KEY (document_id, collection_id) REFERENCES pgrag.documents (id, collection_id)"
        " ON DELETE CASCADE",
    ),
    (
        "chunks",
        "chunks_parent_id_fkey",
        "FOREIGN KEY (parent_id, collection_id) REFERENCES pgrag.chunks (id, collection_id)"
        " ON DELETE CASCADE",
    ),
    (
        "embedding_queue",
        "embedding_queue_chunk_id_fkey",
        "FOREIGN KEY (chunk_id, collection_id) REFERENCES pgrag.chunks (id, collection_id)"
        " ON DELETE CASCADE",
    ),
)


def _unwrap_policies(conn: psycopg.Connection) -> None:
    """Each policy again, its (SELECT pgrag.f() AS f) initplans as plain calls f()."""
    rows = conn.execute(
        "SELECT tablename, policyname, cmd, roles::text[], qual, with_check FROM pg_policies"
        " WHERE schemaname = 'pgrag'"
    ).fetchall()
    for table, name, cmd, roles, qual, check in rows:
        conn.execute(f'DROP POLICY "{name}" ON pgrag."{table}"')
        clauses = [f"FOR {cmd}", "TO " + ", ".join(roles)]
        for word, expression in (("USING", qual), ("WITH CHECK", check)):
            if expression:
                for function in (
                    "unrestricted",
                    "visible_acls",
                    "session_principals",
                    "session_caller",
                ):
                    expression = expression.replace(
                        f"( SELECT pgrag.{function}() AS {function})", f"pgrag.{function}()"
                    )
                clauses.append(f"{word} ({expression})")
        conn.execute(f'CREATE POLICY "{name}" ON pgrag."{table}" ' + " ".join(clauses))


def probe(dsn: str) -> list[tuple[str, str, str, str]]:
    results = []
    with psycopg.connect(dsn) as conn:
        version = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'citus'"
        ).fetchone()
        if version is None:
            raise SystemExit(f"citus_probe: no citus extension in {dsn}; is it a coordinator?")
        for round_ in ROUNDS:
            with conn.transaction(force_rollback=True):
                results.extend(_distribute(conn, round_))
    return results


def _distribute(conn: psycopg.Connection, round_: str) -> list[tuple[str, str, str, str]]:
    """Round `round_`'s changes, then each table distributed (or made a reference table)."""
    results = []
    # (several tables converted in one transaction: one connection per worker)
    conn.execute("SET LOCAL citus.multi_shard_modify_mode = sequential")
    if round_ != ROUNDS[0]:
        conn.execute("SET LOCAL citus.enable_unsafe_triggers = on")
    if round_ in ROUNDS[2:]:
        _unwrap_policies(conn)
    if round_ in ROUNDS[4:]:
        # documents' and chunks' ids are identity columns, which Citus 12 refuses
        # to distribute: the same ids from a sequence, to see what comes next.
        for table in ("documents", "chunks"):
            conn.execute(f"ALTER TABLE pgrag.{table} ALTER id DROP IDENTITY")
            conn.execute(f"CREATE SEQUENCE pgrag.{table}_id_seq OWNED BY pgrag.{table}.id")
            conn.execute(
                f"ALTER TABLE pgrag.{table} ALTER id SET DEFAULT nextval('pgrag.{table}_id_seq')"
            )
    if round_ in ROUNDS[3:]:
        # role_principals' and conversation_turns' policies are EXISTS subqueries
        # (over pg_roles, over conversations): dropped, to see what comes next.
        conn.execute('DROP POLICY "own" ON pgrag.role_principals')
        conn.execute('DROP POLICY "own" ON pgrag.conversation_turns')
    if round_ in ROUNDS[5:]:
        # Keys that carry the distribution column; the foreign keys between
        # distributed tables come back once both ends are distributed.
        for table, name, _ in FOREIGN_KEYS:
            conn.execute(f'ALTER TABLE pgrag.{table} DROP CONSTRAINT "{name}"')
        for table, name, key in KEYS:
            conn.execute(f'ALTER TABLE pgrag.{table} DROP CONSTRAINT "{name}", ADD {key}')
    for kind, tables in (("reference", REFERENCE), ("distributed", DISTRIBUTED)):
        for table in tables:
            call = (
                f"SELECT create_reference_table('pgrag.{table}')"
                if kind == "reference"
                else f"SELECT create_distributed_table('pgrag.{table}', 'collection_id')"
            )
            results.append((round_, kind, table, _attempt(conn, call)))
    if round_ in ROUNDS[5:]:
        for table, name, key in FOREIGN_KEYS:
            call = f"ALTER TABLE pgrag.{table} ADD {key}"
            results.append((round_, "foreign key", name, _attempt(conn, call)))
    return results
    return results


def _attempt(
    conn: psycopg.Connection,
    statement: str,
    got: dict[str, object] | None = None,
    what: str = "",
    params: tuple[object, ...] | None = None,
) -> str:
    """The statement in a savepoint: "ok", or the server's message (and detail). The first
    column of its first row, if any, goes into `got` under `what`."""
    try:
        with conn.transaction():
            cur = conn.execute(statement, params)
            row = cur.fetchone() if got is not None and cur.description else None
            if got is not None and row is not None:
                got[what] = row[0]
        return "ok"
    except psycopg.Error as err:
        outcome = (err.diag.message_primary or str(err)).strip()
        if err.diag.message_detail:
            outcome += f" ({err.diag.message_detail.strip()})"
        return outcome


# What an ingest writes first, in its order, once every table is distributed, each in a
# transaction of its own, as an ingest commits them: a model, a collection that uses it
# (collections' triggers record the model in collection_models and create the collection's
# partition of the vectors), a document, a chunk. {n} keeps each way's rows apart.
WRITES = (
    (
        "model",
        "INSERT INTO pgrag.embedding_models (name, provider, dimension)"
        " VALUES ('citus-probe-{n}', 'probe', 3) RETURNING id",
    ),
    (
        "collection",
        "INSERT INTO pgrag.collections (name, model_id)"
        " VALUES ('citus-probe-{n}', {model}) RETURNING id",
    ),
    (
        "document",
        "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
        " VALUES ({collection}, 'probe.txt', 'h') RETURNING id",
    ),
    (
        "chunk",
        "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content,"
        " token_count, content_hash, text_config)"
        " VALUES ({document}, {collection}, 0, 'a probe', 2, 'h', 'english') RETURNING id",
    ),
)


def write(dsn: str) -> list[tuple[str, str, str, str]]:
    """The last round kept (committed), then WRITES three ways (WAYS), each way on a
    connection of its own and each write committed, as an ingest commits them."""
    results = []
    with psycopg.connect(dsn) as conn:
        distributed = conn.execute(
            "SELECT EXISTS (SELECT FROM pg_dist_partition"
            "                WHERE logicalrelid = 'pgrag.documents'::regclass)"
        ).fetchone()
        if distributed != (False,):
            raise SystemExit(
                "citus_probe --write: pgrag's tables here are distributed already (by an"
                " earlier --write); to start again: DROP SCHEMA pgrag CASCADE; pgrag db upgrade"
            )
        if conn.execute("SELECT EXISTS (SELECT FROM pgrag.collections)").fetchone() != (False,):
            raise SystemExit(
                "citus_probe --write: this database has collections; --write leaves the"
                " schema distributed, so give it a database made for the probe"
            )
        rows = _distribute(conn, ROUNDS[-1])
        results.extend(rows)
        if any(row[3] != "ok" for row in rows):
            conn.rollback()
            return results
        conn.commit()
    for n, way in enumerate(WAYS):
        if way == WAYS[3]:
            _fourth_way(dsn)
        if way == WAYS[2]:
            # Citus refuses a function that is not IMMUTABLE in ON CONFLICT ... DO UPDATE
            # SET: the trigger's now() becomes the inserted row's own value.
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pg_get_functiondef('pgrag.collection_model_changed()'::regprocedure)"
                ).fetchone()
                assert row is not None
                conn.execute(
                    row[0].replace("activated_at = now()", "activated_at = EXCLUDED.activated_at")
                )
        got: dict[str, object] = {"n": n}
        with psycopg.connect(dsn) as conn:
            if way != WAYS[0]:
                # SET LOCAL in each transaction then reaches the workers' sessions, where
                # the triggers run.
                conn.execute("SET citus.propagate_set_commands = 'local'")
                conn.commit()
            steps = list(WRITES)
            if way == WAYS[3]:
                steps[2:2] = SETUP
                steps.append(VECTOR)
            for what, statement in steps:
                try:
                    with conn.transaction():
                        if way != WAYS[0]:
                            conn.execute("SET LOCAL citus.allow_nested_distributed_execution = on")
                        outcome = _attempt(conn, statement.format(**got), got, what)
                except psycopg.Error as err:
                    outcome = "at commit: " + (err.diag.message_primary or str(err)).strip()
                results.append(("write", way, what, outcome))
                if outcome != "ok":
                    break  # (the next write needs this one's row)
            else:
                if way == WAYS[3]:
                    for what, vector in SEARCHES:
                        hits: dict[str, object] = {}
                        outcome = _attempt(
                            conn,
                            "SELECT count(*) FROM pgrag.search_v5(%s, 'a probe', %s::vector, 10)",
                            hits,
                            what,
                            (f"citus-probe-{n}", vector),
                        )
                        if outcome == "ok":
                            outcome = f"ok, {hits[what]} result(s)"
                        results.append(("search", way, what, outcome))
                    conn.commit()
    return results


WAYS = (
    "as shipped",
    "nested execution allowed",
    "and no now() in ON CONFLICT",
    "and collections' work the writer's",
)

# The fourth way: collections' two triggers (which run on each worker's copy of the reference
# table) dropped, their work done by the writer on the coordinator after the collection
# insert; a vector's chunk looked up with its collection_id (a lookup FOR SHARE must name its
# shard); then a vector written and the collection searched.
SETUP = (
    (
        "collection's model",
        "INSERT INTO pgrag.collection_models (collection_id, model_id, status, activated_at)"
        " VALUES ({collection}, {model}, 'active', now()) RETURNING 1",
    ),
    ("collection's partition", "SELECT pgrag.collection_partition({collection})"),
)
VECTOR = (
    "vector",
    "INSERT INTO pgrag.chunk_embeddings (chunk_id, model_id, collection_id, embedding)"
    " VALUES ({chunk}, {model}, {collection}, '[1,0,0]') RETURNING 1",
)
SEARCHES = (
    ("keyword search", None),
    ("hybrid search", "[1,0,0]"),
)
# search_engine's statements read one collection, but join chunks to documents (and results to
# chunks) by id alone: Citus plans such a join only between co-located tables joined on their
# distribution column, or each table pinned to one value of it. With these conditions added
# (true whenever a chunk's collection is its document's, which the round-6 keys make sure of),
# and the statements planned with their values (force_custom_plan: Citus cannot plan a
# generic plan's parameters), every statement goes to the one shard of the collection.
SEARCH_JOINS = (
    (
        r"JOIN pgrag\.chunks c ON c\.id = (r|f)\.id\b",
        r"\g<0> AND c.collection_id = v_collection_id",
    ),
    (
        r"JOIN pgrag\.documents d ON d\.id = c\.document_id\b",
        r"\g<0> AND d.collection_id = c.collection_id",
    ),
    (
        r"JOIN pgrag\.chunks c ON c\.document_id = d\.id\b",
        r"\g<0> AND c.collection_id = d.collection_id",
    ),
    (
        r"JOIN pgrag\.chunks c ON c\.id = ce\.chunk_id\b",
        r"\g<0> AND c.collection_id = ce.collection_id",
    ),
    (
        r"JOIN pgrag\.chunks c ON c\.id = p\.chunk_id\b",
        r"\g<0> AND c.collection_id = p.collection_id",
    ),
)
SEARCH_ENGINE = (
    "pgrag.search_engine(text, text, vector, integer, jsonb, integer, integer, integer,"
    " double precision, double precision, double precision, integer, integer, text)"
)


def _redefine(conn: psycopg.Connection, function: str, edits: list[tuple[str, str]]) -> None:
    """CREATE OR REPLACE ``function`` with its definition edited (regular expressions); each
    edit must match."""
    import re

    row = conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (function,)).fetchone()
    assert row is not None
    text = row[0]
    for pattern, replacement in edits:
        text, n = re.subn(pattern, replacement, text)
        assert n, f"{function}: {pattern} matched nothing"
    conn.execute(text)


def _fourth_way(dsn: str) -> None:
    """What the fourth way changes, on the coordinator (propagated to the workers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET citus.enable_unsafe_triggers = on")
        conn.execute("DROP TRIGGER collections_model ON pgrag.collections")
        conn.execute("DROP TRIGGER collections_partition ON pgrag.collections")
        _redefine(
            conn,
            "pgrag.chunk_embeddings_acl()",
            [
                (
                    r"WHERE c\.id = NEW\.chunk_id FOR SHARE",
                    "WHERE c.id = NEW.chunk_id AND c.collection_id = NEW.collection_id FOR SHARE",
                )
            ],
        )
        _redefine(
            conn,
            SEARCH_ENGINE,
            [
                *SEARCH_JOINS,
                (
                    "plan_cache_mode TO 'force_generic_plan'",
                    "plan_cache_mode TO 'force_custom_plan'",
                ),
            ],
        )


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        rows = write(argv[1])
    elif len(argv) == 1 and not argv[0].startswith("-"):
        rows = probe(argv[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for round_, kind, table, outcome in rows:
        print(f"{round_:28}  {kind:11}  {table:17}  {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
