"""Listing for a reader who may see nothing: documents_v1 and collections_v1 before (revision
0010's bodies) and after (this release's), against a superuser on the same data.

Issue 16, item 4: 0010's documents_v1 evaluated visible_acls() per row and read every document
of the collection, so a reader who may see nothing waited longer than a superuser. The corpus:
N documents (default 5,000) with one chunk each, in one collection, each readable by one of
50 tenants (principal tenant:NN), none public. Sessions: a superuser (sees everything), a
pgrag_reader mapped to no principal (sees nothing) and one mapped to one tenant (2%). Each
function is called --repeat times per session, interleaved; the median is reported, with each
session's ratio to the superuser's, for 0010's bodies (installed for the run in schema
bench_old, SECURITY DEFINER like the originals) and for this release's.

    .venv/bin/python benchmarks/listing.py                  # 5,000 documents, about a minute
    .venv/bin/python benchmarks/listing.py --documents 200000 --only-now  # this release only

--only-now skips 0010's bodies (which take seconds per call from ~5,000 documents up) and
also times pgrag.status() and collections_v2 for the superuser, whose document and chunk
counts become estimates above pgrag.exact_count_limit (100,000) rows.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import fresh_database, log  # noqa: E402

MARKER = "pgrag benchmark: benchmarks/listing.py"
ROLES = {"nothing": "pgrag_bench_list_nothing", "one tenant": "pgrag_bench_list_one"}
TENANTS = 50
MIGRATION = (
    Path(__file__).resolve().parents[1]
    / "migrations/versions/0011_c_listing_and_query_retention.py"
)


def _old_bodies() -> str:
    """Revision 0010's documents_v1 and collections_v1, renamed into schema bench_old."""
    text = MIGRATION.read_text(encoding="utf-8")
    found = re.search(r'OLD_LISTING = r"""(.*?)"""', text, re.S)
    assert found, "OLD_LISTING not found in the migration"
    return found.group(1).replace("FUNCTION pgrag.", "FUNCTION bench_old.")


def load(dsn: str, documents: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgrag.collections (name) VALUES ('bench')")
        conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, title, content_hash, principals)"
            " SELECT c.id, 'doc-' || lpad(g::text, 6, '0'), 'Document ' || g, md5(g::text),"
            "        ARRAY['tenant:' || (g %% %(t)s)]"
            "   FROM pgrag.collections c, generate_series(1, %(n)s) g WHERE c.name = 'bench'",
            {"n": documents, "t": TENANTS},
        )
        conn.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            "                          content_hash, text_config)"
            " SELECT d.id, d.collection_id, 0, 'Quarterly report number ' || d.id"
            "        || ' is filed by the finance team.', 10, md5(d.id::text), 'english'"
            "   FROM pgrag.documents d"
        )
        conn.execute("VACUUM ANALYZE pgrag.documents")
        conn.execute("VACUUM ANALYZE pgrag.chunks")
        conn.execute("DROP SCHEMA IF EXISTS bench_old CASCADE")
        conn.execute("CREATE SCHEMA bench_old")
        conn.execute(_old_bodies())
        for role in ROLES.values():
            if (
                conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
                is None
            ):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA bench_old TO {}").format(sql.Identifier(role))
            )
            conn.execute(
                sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA bench_old TO {}").format(
                    sql.Identifier(role)
                )
            )
        conn.execute(
            "DELETE FROM pgrag.role_principals WHERE role_name = ANY (%s)", (list(ROLES.values()),)
        )
        conn.execute(
            "INSERT INTO pgrag.role_principals (role_name, principal) VALUES (%s, 'tenant:1')",
            (ROLES["one tenant"],),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None, help="a superuser connection (default: embedded)")
    parser.add_argument("--database", default="pgrag_bench_listing")
    parser.add_argument("--documents", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only-now", action="store_true", help="skip 0010's bodies")
    args = parser.parse_args()
    dsn = fresh_database(args.dsn, args.database, MARKER)
    t0 = time.perf_counter()
    load(dsn, args.documents)
    log(f"loaded {args.documents:,} documents in {time.perf_counter() - t0:.1f} s")
    sessions = {
        "superuser": psycopg.connect(dsn, autocommit=True),
        **{
            name: psycopg.connect(make_conninfo(dsn, user=role), autocommit=True)
            for name, role in ROLES.items()
        },
    }
    calls = {
        ("documents_v1", "0010"): "SELECT count(*) FROM bench_old.documents_v1('bench')",
        ("documents_v1", "now"): "SELECT count(*) FROM pgrag.documents_v1('bench')",
        ("collections_v1", "0010"): "SELECT sum(documents) FROM bench_old.collections_v1()",
        ("collections_v1", "now"): "SELECT sum(documents) FROM pgrag.collections_v1()",
    }
    if args.only_now:
        calls = {k: v for k, v in calls.items() if k[1] == "now"}
    seconds: dict[tuple[str, str, str], list[float]] = {}
    rows: dict[tuple[str, str, str], int] = {}
    for _ in range(args.repeat + 1):  # the first round warms up
        for call, statement in calls.items():
            for who, conn in sessions.items():
                t = time.perf_counter()
                (n,) = conn.execute(statement).fetchone()
                seconds.setdefault((*call, who), []).append(time.perf_counter() - t)
                rows[(*call, who)] = int(n or 0)
    report = []
    for (fn, version), _ in calls.items():
        base = statistics.median(seconds[(fn, version, "superuser")][1:])
        for who in sessions:
            key = (fn, version, who)
            ms = statistics.median(seconds[key][1:]) * 1000
            report.append(
                {
                    "function": fn,
                    "bodies": version,
                    "session": who,
                    "rows": rows[key],
                    "median_ms": round(ms, 2),
                    "vs_superuser": round(ms / (base * 1000), 2),
                }
            )
    status: dict[str, object] = {}
    if args.only_now:  # the superuser's status and collections, exact (0010's way) and now
        su = sessions["superuser"]
        for name, statement in (
            ("status() now", "SELECT documents, chunks, estimated FROM pgrag.status()"),
            (
                "collections_v2 now",
                "SELECT documents, chunks, estimated FROM pgrag.collections_v2()",
            ),
            (
                "exact count(*) of documents and chunks",
                "SELECT (SELECT count(*) FROM pgrag.documents),"
                " (SELECT count(*) FROM pgrag.chunks), false",
            ),
        ):
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                row = su.execute(statement).fetchone()
                times.append(time.perf_counter() - t)
            status[name] = {
                "median_ms": round(statistics.median(times) * 1000, 2),
                "row": list(row),
            }
            log(f"superuser {name:<40} {statistics.median(times) * 1000:8.2f} ms  {row}")
    for who in sessions:
        for fn in ("documents_v1", "collections_v1"):
            if args.only_now:
                continue
            old = statistics.median(seconds[(fn, "0010", who)][1:])
            new = statistics.median(seconds[(fn, "now", who)][1:])
            log(
                f"{fn:<15} {who:<11} 0010 {old * 1000:8.2f} ms  now {new * 1000:8.2f} ms"
                f"  speed-up {old / new:6.1f}x"
            )
    print(json.dumps({"documents": args.documents, "results": report, "status": status}, indent=2))
    for conn in sessions.values():
        conn.close()


if __name__ == "__main__":
    main()
