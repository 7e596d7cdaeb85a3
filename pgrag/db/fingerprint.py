"""What pgrag's schema is, read from the catalog: the fingerprint ``pgrag db check`` compares.

:func:`take` reads every object of schema pgrag that decides what the database does -- each
function's definition (body, language, security, settings, arguments, result), tables (and
whether they are logged), their columns, constraints, indexes, triggers (and whether they, and
the foreign keys' own triggers, are enabled), rules, tables that inherit from them, row-level
security and its policies, operators, every privilege granted to a role other than the owner,
and the default privileges of the schema -- into plain JSON. Text the server writes out (index
and trigger definitions, policy expressions) is taken with only pg_catalog and pgvector's schema
on the search_path, so it reads the same on every installation.

This release's fingerprint ships as ``pgrag/db/expected_schema.json``, taken from a database
that ``pgrag db upgrade`` installed fresh. Regenerate it after changing anything in sql/ or a
migration::

    python -m pgrag.db.fingerprint --write

(it starts a throwaway embedded server); a test fails while the shipped one is stale.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from pgrag.db import queries, schema
from pgrag.db.server import EmbeddedServer

Q = queries.load(__name__)

EXPECTED = "expected_schema.json"


def _text(value: str | None) -> str | None:
    return None if value is None else re.sub(r"\s+", " ", value).strip()


def _hash(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def _grants(rows: list[tuple[Any, ...]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, grantee, privilege in rows:
        out.setdefault(name, []).append(f"{grantee} {privilege}")
    return {k: sorted(v) for k, v in out.items()}


def take(conn: Any) -> dict[str, Any]:
    """The fingerprint of the database's schema pgrag, in the caller's transaction."""
    conn.execute(Q.plain_search_path)

    def fetch(query: str) -> list[Any]:
        return list(conn.execute(query).fetchall())

    columns: dict[str, list[list[Any]]] = {}
    for table, *column in fetch(Q.columns):
        column[3] = _text(column[3])
        columns.setdefault(table, []).append(column)
    return {
        "functions": {sig: _hash(definition) for sig, definition in fetch(Q.functions)},
        "function_grants": _grants(fetch(Q.function_grants)),
        "relations": {
            name: {
                "kind": kind,
                "rls": rls,
                "force_rls": force,
                "persistence": persistence,
                "replica_identity": replica,
                "options": list(options),
            }
            for name, kind, rls, force, persistence, replica, options in fetch(Q.relations)
        },
        "sequences": {
            name: {
                "type": kind,
                "start": start,
                "min": low,
                "max": high,
                "increment": step,
                "cycle": cycle,
            }
            for name, kind, start, low, high, step, cycle in fetch(Q.sequences)
        },
        "relation_grants": _grants(fetch(Q.relation_grants)),
        "columns": columns,
        "column_grants": _grants(fetch(Q.column_grants)),
        "constraints": {
            name: {"definition": _text(d), "validated": v} for name, d, v in fetch(Q.constraints)
        },
        "indexes": {name: {"definition": _text(d), "valid": v} for name, d, v in fetch(Q.indexes)},
        "triggers": {
            name: {"definition": _text(d), "enabled": e} for name, d, e in fetch(Q.triggers)
        },
        "policies": {
            name: {
                "command": cmd,
                "permissive": permissive,
                "roles": list(roles),
                "using": _text(using),
                "check": _text(check),
            }
            for name, cmd, permissive, roles, using, check in fetch(Q.policies)
        },
        "schema_grants": sorted(f"{g} {p}" for g, p in fetch(Q.schema_grants)),
        "types": {name: kind for name, kind in fetch(Q.types)},
        "rules": {name: _text(d) for name, d in fetch(Q.rules)},
        "disabled_internal_triggers": {t: n for t, n in fetch(Q.disabled_internal_triggers)},
        "children": {child: parent for child, parent in fetch(Q.children)},
        "parents": sorted(f"{child} {parent}" for child, parent in fetch(Q.parents)),
        "statistics": sorted(r[0] for r in fetch(Q.statistics)),
        "default_privileges": sorted(" ".join(r) for r in fetch(Q.default_privileges)),
        "operators": sorted(r[0] for r in fetch(Q.operators)),
        "publications": sorted(
            f"{p} {what}"
            for p, what in fetch(Q.publications)
            + (fetch(Q.schema_publications) if conn.info.server_version >= 150000 else [])
        ),
        "database_settings": sorted(
            f"{who} {setting}" for who, setting in fetch(Q.database_settings)
        ),
    }


def split_name(name: str) -> list[str]:
    """The parts of a dotted name as the catalog writes it, each unquoted:
    'pgrag."Docs".keep' -> ['pgrag', 'Docs', 'keep'] (regclass text and quote_ident quote a
    part only where it needs it)."""
    parts: list[str] = []
    i, n = 0, len(name)
    while i < n:
        if name[i] == '"':
            j, part = i + 1, []
            while j < n:
                if name[j] == '"':
                    if j + 1 < n and name[j + 1] == '"':
                        part.append('"')
                        j += 2
                        continue
                    break
                part.append(name[j])
                j += 1
            parts.append("".join(part))
            i = j + 1
        else:
            j = name.find(".", i)
            j = n if j < 0 else j
            parts.append(name[i:j])
            i = j
        if i < n and name[i] == ".":
            i += 1
    return parts


def expected() -> dict[str, Any]:
    """This release's fingerprint, as shipped."""
    path = resources.files("pgrag.db") / EXPECTED
    return dict(json.loads(path.read_text(encoding="utf-8")))


def existing_roles(conn: Any) -> set[str]:
    return {r[0] for r in conn.execute(Q.roles).fetchall()}


def generate() -> dict[str, Any]:
    """A fingerprint of this release, taken from a fresh install on a throwaway server."""
    import psycopg

    directory = Path(tempfile.mkdtemp(prefix="pgrag-fingerprint-"))
    server = EmbeddedServer(directory, settings={"fsync": "off"})
    try:
        dsn = server.ensure_running()
        schema.upgrade(dsn)
        with psycopg.connect(dsn) as conn:
            return take(conn)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgrag.db.fingerprint", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write pgrag/db/{EXPECTED}")
    args = parser.parse_args(argv)
    text = json.dumps(generate(), indent=1, sort_keys=True) + "\n"
    if args.write:
        target = Path(__file__).with_name(EXPECTED)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
