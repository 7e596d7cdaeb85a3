"""What stands between pgrag's schema and Citus, asked of a real Citus coordinator.

Run `pgrag db upgrade` against the coordinator first (pgrag installs there as ordinary local
tables), then:

    python benchmarks/citus_probe.py "postgresql://postgres@coordinator/postgres"

For each of pgrag's tables it tries what distributing the schema by collection would do
(reference tables for the small shared ones, ``create_distributed_table(..., 'collection_id')``
for the rest), each in a savepoint that is rolled back, and prints the server's answer. Five
rounds, each removing what stopped the one before: the schema as shipped; with
``citus.enable_unsafe_triggers``; with the row-level security policies rewritten without their
``(SELECT f())`` wrappers, which Citus refuses as subqueries; with the two policies that are
EXISTS subqueries dropped; and with documents' and chunks' identity columns made plain sequence
defaults. Nothing is kept. docs/scale.md#citus has the result on Citus 12.1.12, PostgreSQL 15,
pgvector 0.8.0.
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
)
ROUNDS = (
    "as shipped",
    "unsafe triggers allowed",
    "policies without initplans",
    "and no EXISTS policies",
    "and ids from sequences",
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
                        conn.execute(f"CREATE SEQUENCE pgrag.{table}_probe_seq")
                        conn.execute(
                            f"ALTER TABLE pgrag.{table} ALTER id"
                            f" SET DEFAULT nextval('pgrag.{table}_probe_seq')"
                        )
                if round_ in ROUNDS[3:]:
                    # role_principals' and conversation_turns' policies are EXISTS subqueries
                    # (over pg_roles, over conversations): dropped, to see what comes next.
                    conn.execute('DROP POLICY "own" ON pgrag.role_principals')
                    conn.execute('DROP POLICY "own" ON pgrag.conversation_turns')
                for kind, tables in (("reference", REFERENCE), ("distributed", DISTRIBUTED)):
                    for table in tables:
                        call = (
                            f"SELECT create_reference_table('pgrag.{table}')"
                            if kind == "reference"
                            else f"SELECT create_distributed_table('pgrag.{table}',"
                            " 'collection_id')"
                        )
                        try:
                            with conn.transaction():
                                conn.execute(call)
                            outcome = "ok"
                        except psycopg.Error as err:
                            outcome = (err.diag.message_primary or str(err)).strip()
                            if err.diag.message_detail:
                                outcome += f" ({err.diag.message_detail.strip()})"
                        results.append((round_, kind, table, outcome))
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    for round_, kind, table, outcome in probe(argv[0]):
        print(f"{round_:28}  {kind:11}  {table:17}  {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
