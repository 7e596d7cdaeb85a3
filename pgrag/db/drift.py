"""``pgrag db check``: the live schema against what this release installs.

:func:`check` compares the database with this release: its revision, its functions' release,
and the fingerprint (:mod:`pgrag.db.fingerprint`) of every function, table, column,
constraint, index, trigger, rule, policy, operator and privilege of schema pgrag; then each
model's HNSW index (present, valid, and built as ``pgrag.model_index_ddl`` builds it), who owns
what, pgrag's roles (a restricted one must not read everything), and whether any chunk lacks
a vector nothing would ever compute. Each difference is a :class:`Drift`, named, with what to
do when :mod:`pgrag.db.repair` cannot restore it.

Function bodies are compared whatever ``pgrag.release()`` claims: it is a function like the
others, so a hand that changes a body can change it too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pgrag.db import fingerprint, queries, schema
from pgrag.db.dsn import open_connection

Q = queries.load(__name__)

ROLES = ("pgrag_reader", "pgrag_writer", "pgrag_app")
RESTRICTED = ("pgrag_reader", "pgrag_app")
BACKUP = "not repairable: restore the table from a backup"
# Column attributes in a fingerprint, and which of them repair sets back (the others would
# rewrite or lose data).
COLUMN = ("type", "not null", "default", "identity", "generated", "collation")
REPAIRABLE_COLUMN = {"not null", "default", "identity"}
# The storage options of pgrag's model indexes (pgrag.model_index_ddl).
HNSW_OPTIONS = ["m=16", "ef_construction=128"]


@dataclass(frozen=True)
class Drift:
    kind: str  # function, table, column, constraint, index, trigger, policy, grant, ...
    name: str
    problem: str
    repairable: bool = True
    fix: str | None = None  # what to do when `pgrag db repair` cannot

    def describe(self) -> str:
        fix = f" ({self.fix})" if self.fix else ""
        return f"{self.kind} {self.name}: {self.problem}{fix}"


def for_roles(grants: list[str], roles: set[str]) -> set[str]:
    """The grants whose grantee exists here (PUBLIC always does)."""
    return {g for g in grants if g.split(" ", 1)[0] not in ROLES or g.split(" ", 1)[0] in roles}


def compare(expected: dict[str, Any], live: dict[str, Any], roles: set[str]) -> list[Drift]:
    """Every difference between two fingerprints, as drifts."""
    out: list[Drift] = []

    def objects(section: str, kind: str, what: dict[str, str] | None = None) -> None:
        exp, got = expected.get(section, {}), live.get(section, {})
        for name in sorted(set(exp) | set(got)):
            if name not in got:
                out.append(Drift(kind, name, "missing"))
            elif name not in exp:
                out.append(Drift(kind, name, "not part of pgrag (unexpected)"))
            elif exp[name] != got[name]:
                problem = "differs from this release"
                for key, text in (what or {}).items():
                    if exp[name].get(key) != got[name].get(key):
                        problem = text
                        break
                out.append(Drift(kind, name, problem))

    objects("functions", "function")
    objects("constraints", "constraint", {"validated": "not validated"})
    objects("indexes", "index", {"valid": "invalid (an interrupted build?)"})
    objects("triggers", "trigger", {"enabled": "disabled or in another firing mode"})
    objects("policies", "policy")
    objects("rules", "rule")
    objects("types", "type")
    for operator in sorted(set(live.get("operators", [])) - set(expected.get("operators", []))):
        out.append(Drift("operator", operator, "not part of pgrag (unexpected)"))
    for table, n in sorted(live.get("disabled_internal_triggers", {}).items()):
        out.append(
            Drift(
                "foreign-key triggers of",
                table,
                f"{n} disabled: rows can break their foreign keys",
                fix="a superuser runs ALTER TABLE ... ENABLE TRIGGER ALL",
            )
        )
    for entry in live.get("parents", []):
        child, parent = entry.split(" ", 1)
        out.append(
            Drift(
                "table",
                child,
                f"inherits from {parent}: every read of {parent} shows its rows, whatever"
                " row-level security",
            )
        )
    for name in live.get("statistics", []):
        out.append(Drift("statistics", name, "not part of pgrag (unexpected)"))
    for child, parent in sorted(live.get("children", {}).items()):
        out.append(
            Drift("table", child, f"inherits from {parent}: its rows show in every read of it")
        )
    for entry in sorted(
        set(live.get("default_privileges", [])) - set(expected.get("default_privileges", []))
    ):
        role, objects_, grantee, privilege = entry.split(" ", 3)
        out.append(
            Drift(
                "default privileges",
                f"of {role} in schema pgrag",
                f"grant {privilege} on new {_OBJECTS.get(objects_, objects_)} to {grantee}",
            )
        )
    for name, want in sorted(expected.get("sequences", {}).items()):
        got = live.get("sequences", {}).get(name)
        if got is not None and got != want:
            differ = ", ".join(f"{k} {got[k]} (not {want[k]})" for k in want if got[k] != want[k])
            out.append(Drift("sequence", name, f"is defined otherwise: {differ}"))
    for entry in live.get("publications", []):
        publication, what = entry.split(" ", 1)
        out.append(
            Drift(
                "publication",
                publication,
                f"sends {what} to its subscribers, every row whatever row-level security",
                repairable=False,
                fix=f"if it is not yours, its owner runs ALTER PUBLICATION {publication} DROP ..."
                " (or DROP PUBLICATION)",
            )
        )
    for entry in live.get("database_settings", []):
        who, setting = entry.split(" ", 1)
        out.append(
            Drift(
                "database setting",
                f"{setting} (for {who})",
                "pgrag's triggers do not fire: documents lose their access lists and chunks"
                " their keyword postings",
                repairable=False,
                fix="a superuser runs "
                + (
                    "ALTER DATABASE ... RESET session_replication_role"
                    if who == "everyone"
                    else f"ALTER ROLE {who} [IN DATABASE ...] RESET session_replication_role"
                ),
            )
        )
    out += _relations(expected, live)
    out += _columns(expected, live)
    out += _grants(expected, live, roles)
    return out


_OBJECTS = {"r": "tables", "S": "sequences", "f": "functions", "T": "types", "n": "schemas"}
_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


def _relations(expected: dict[str, Any], live: dict[str, Any]) -> list[Drift]:
    out: list[Drift] = []
    exp_rel, got_rel = expected["relations"], live["relations"]
    for name in sorted(set(exp_rel) | set(got_rel)):
        if name not in got_rel:
            if exp_rel[name]["kind"] == "S":  # an identity column's: comes back with it
                out.append(Drift("sequence", name, "missing (its column lost its identity)"))
            else:
                out.append(Drift("table", name, "missing", repairable=False, fix=BACKUP))
        elif name not in exp_rel:
            view = got_rel[name]["kind"] in ("v", "m")  # repair drops a view, never a table
            out.append(
                Drift(
                    "relation",
                    name,
                    "not part of pgrag (unexpected)",
                    repairable=view,
                    fix=None
                    if view
                    else "drop it, or move it out of schema pgrag, if it is not pgrag's;"
                    " repair revokes what pgrag's roles were granted on it",
                )
            )
        else:
            e, g = exp_rel[name], got_rel[name]
            if e["rls"] != g["rls"]:
                state = "enabled" if e["rls"] else "disabled"
                out.append(Drift("row-level security", name, f"should be {state}"))
            if e["force_rls"] != g["force_rls"]:
                out.append(Drift("row-level security", name, "FORCE differs from this release"))
            if e.get("persistence") != g.get("persistence"):
                out.append(Drift("table", name, "is UNLOGGED: a crash empties it"))
            if e.get("replica_identity", "d") != g.get("replica_identity", "d"):
                out.append(
                    Drift(
                        "table",
                        name,
                        f"has replica identity {_IDENTITY.get(g.get('replica_identity'), '?')}"
                        f" (not {_IDENTITY.get(e.get('replica_identity'), '?')}): published,"
                        " its updates and deletes fail",
                    )
                )
            if e.get("options", []) != g.get("options", []):
                shown = ", ".join(g.get("options", [])) or "none"
                out.append(Drift("table", name, f"has storage options {shown}, not as released"))
    return out


def _columns(expected: dict[str, Any], live: dict[str, Any]) -> list[Drift]:
    out: list[Drift] = []
    for table in sorted(set(expected["columns"]) & set(live["columns"])):
        exp = {c[0]: c[1:] for c in expected["columns"][table]}
        got = {c[0]: c[1:] for c in live["columns"][table]}
        for column in [c[0] for c in expected["columns"][table]] + sorted(set(got) - set(exp)):
            name = f"{table}.{column}"
            if column not in got:
                out.append(Drift("column", name, "missing", repairable=False, fix=BACKUP))
            elif column not in exp:
                out.append(
                    Drift(
                        "column",
                        name,
                        "not part of pgrag (unexpected)",
                        repairable=False,
                        fix="drop it if it is not pgrag's (repair never drops data)",
                    )
                )
            else:
                differ = [
                    a for a, x, y in zip(COLUMN, exp[column], got[column], strict=True) if x != y
                ]
                if differ:
                    ok = set(differ) <= REPAIRABLE_COLUMN
                    out.append(
                        Drift(
                            "column",
                            name,
                            f"{' and '.join(differ)} differ{'s' * (len(differ) == 1)} from"
                            " this release",
                            repairable=ok,
                            fix=None if ok else BACKUP,
                        )
                    )
        order = [c for c in got if c in exp]
        if [c for c in exp if c in got] != order:
            out.append(Drift("columns of", table, "are in another order", False, BACKUP))
    return out


def exists(live: dict[str, Any], section: str, name: str) -> bool:
    """Whether the object of a grant (a function, a relation, a column) exists in ``live``."""
    if section == "function_grants":
        return name in live["functions"]
    if section == "relation_grants":
        return name in live["relations"]
    *table, column = fingerprint.split_name(name)
    return any(
        fingerprint.split_name(t) == table and any(c[0] == column for c in columns)
        for t, columns in live["columns"].items()
    )


def _grants(expected: dict[str, Any], live: dict[str, Any], roles: set[str]) -> list[Drift]:
    out: list[Drift] = []
    sections = (
        ("function_grants", "function"),
        ("relation_grants", "relation"),
        ("column_grants", "column"),
    )
    for section, kind in sections:
        exp, got = expected.get(section, {}), live.get(section, {})
        for name in sorted(set(exp) | set(got)):
            if not exists(live, section, name):
                continue  # the object itself is missing: reported above
            want = for_roles(exp.get(name, []), roles)
            have = set(got.get(name, []))
            for g in sorted(want - have):
                grantee, privilege = g.split(" ", 1)
                out.append(Drift("grant", f"{privilege} on {kind} {name}", f"{grantee} lacks it"))
            for g in sorted(have - want):
                grantee, privilege = g.split(" ", 1)
                where = f"{privilege} on {kind} {name}"
                out.append(Drift("grant", where, f"{grantee} has it (unexpected)"))
    want = for_roles(expected.get("schema_grants", []), roles)
    have = set(live.get("schema_grants", []))
    for g in sorted(want ^ have):
        grantee, privilege = g.split(" ", 1)
        problem = "lacks it" if g in want else "has it (unexpected)"
        out.append(Drift("grant", f"{privilege} on schema pgrag", f"{grantee} {problem}"))
    return out


def owner(conn: Any) -> tuple[str, list[tuple[str, str, str]], str | None]:
    """The owner of schema pgrag, each object another role owns as (kind, name, its owner),
    and the role that owns most objects when that is not the schema's owner (then which of
    the two is pgrag's owner is for a person to say)."""
    rows = [tuple(r) for r in conn.execute(fingerprint.Q.owners).fetchall()]
    reference = next(r[2] for r in rows if r[0] == "schema")
    most = Counter(r[2] for r in rows if r[0] != "schema").most_common(1)[0][0]
    others = [r for r in rows if r[0] != "schema" and r[2] != reference]
    return reference, others, most if most != reference else None


def check(conn: Any) -> list[Drift]:
    """Everything in which the database differs from this release (empty: none)."""
    st = schema.state_of(conn)
    if not st.revision_current:
        return [Drift("schema", "revision", st.describe(), repairable=False)]
    out: list[Drift] = []
    if not st.functions_current:
        newer = st.functions_newer
        fix = (
            "as pgrag.release() says, which nothing verifies: upgrade pgrag, or if no newer"
            " release ran here, `pgrag db repair --force`"
        )
        out.append(
            Drift("functions", "of schema pgrag", st.describe(), not newer, fix if newer else None)
        )
    live = fingerprint.take(conn)
    roles = fingerprint.existing_roles(conn)
    out += compare(fingerprint.expected(), live, roles)
    (replication_role, source) = conn.execute(Q.replication_role).fetchone()
    if replication_role != "origin":
        out.append(
            Drift(
                "setting",
                "session_replication_role",
                f"is {replication_role} for this role here (from the {source}): pgrag's triggers"
                " do not fire, so documents lose their access lists and chunks their keyword"
                " postings",
                repairable=False,
                fix="a superuser resets it where it is set (ALTER SYSTEM, ALTER DATABASE or"
                " ALTER ROLE ... RESET session_replication_role)",
            )
        )
    out += _model_indexes(conn)
    out += _partitions(conn)
    renamed = renamed_sequences(conn, live)
    for expected_name, actual in renamed:
        out.append(Drift("sequence", expected_name, f"was renamed to {actual}"))
    hidden = {("sequence", e) for e, _ in renamed} | {("relation", a) for _, a in renamed}
    out = [d for d in out if (d.kind, d.name) not in hidden or d.problem.startswith("was renamed")]
    out += _sequences_behind(conn, live)
    out += _owners(conn)
    out += _roles(conn, roles)
    for collection, model, n in conn.execute(Q.unqueued).fetchall():
        out.append(
            Drift(
                "chunks of",
                f"collection {collection!r}",
                f"{n} have no vector of model {model} and are not queued for one",
            )
        )
    return out


def renamed_sequences(conn: Any, live: dict[str, Any]) -> list[tuple[str, str]]:
    """(the name released, the name now) of each identity sequence that was renamed."""
    out = []
    for table, column, sequence in identity_columns(live):
        (actual,) = conn.execute(Q.serial_sequence, {"table": table, "column": column}).fetchone()
        if actual is not None and actual != sequence:
            out.append((sequence, str(actual)))
    return out


def identity_columns(live: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(table, column, its sequence) for each identity column of pgrag's tables."""
    return [
        (table, column[0], f"{table}_{column[0]}_seq")
        for table, columns in sorted(live["columns"].items())
        for column in columns
        if column[4]  # attidentity: 'a' or 'd'
    ]


def behind(conn: Any, table: str, column: str, sequence: str) -> tuple[int, int] | None:
    """(the sequence's next value, the column's largest) when the next value is already used."""
    from psycopg import sql

    row = conn.execute(
        sql.SQL(Q.sequence_position).format(
            column=sql.Identifier(column),
            table=sql.Identifier(*fingerprint.split_name(table)),
        ),
        {"sequence": sequence},
    ).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return None
    next_value, largest = int(row[0]), int(row[1])
    return (next_value, largest) if next_value <= largest else None


def _sequences_behind(conn: Any, live: dict[str, Any]) -> list[Drift]:
    out: list[Drift] = []
    for table, column, sequence in identity_columns(live):
        if sequence not in live["relations"]:
            continue  # reported as missing
        found = behind(conn, table, column, sequence)
        if found:
            out.append(
                Drift(
                    "sequence",
                    sequence,
                    f"would give {found[0]} next, but {table}.{column} already holds up to"
                    f" {found[1]}: every insert fails",
                )
            )
    return out


def _model_indexes(conn: Any) -> list[Drift]:
    out: list[Drift] = []
    for row in conn.execute(Q.model_indexes).fetchall():
        model_id, name, index, valid, method, opclass, want_opclass, expr, want_type = row[:9]
        predicate, want_predicate, options = row[9:]
        where = f"{index} (model {name}, id {model_id})"
        if method is None or not valid:
            out.append(Drift("index", where, "missing or invalid"))
        elif method != "hnsw" or opclass != want_opclass or want_type not in (expr or ""):
            out.append(
                Drift(
                    "index",
                    where,
                    f"is {method} {expr} {opclass}, not hnsw {want_type} {want_opclass}:"
                    " searches do not use it",
                )
            )
        elif predicate != want_predicate:
            out.append(Drift("index", where, f"covers {predicate}, not {want_predicate}"))
        elif sorted(options or []) != sorted(HNSW_OPTIONS):
            shown = ", ".join(options or []) or "the defaults"
            out.append(
                Drift("index", where, f"is built with {shown}, not {', '.join(HNSW_OPTIONS)}")
            )
    for (index,) in conn.execute(Q.stray_model_indexes, {"without": None}).fetchall():
        out.append(Drift("index", index, "belongs to no model a collection uses"))
    return out


def _partitions(conn: Any) -> list[Drift]:
    """Each collection's partition of pgrag.chunk_embeddings, granted to no one
    (sql/functions/partitions.sql). The empty partition a deleted collection leaves is not a
    difference (deleting a collection is an ordinary thing): `pgrag db repair` drops it."""
    out = [
        Drift("partition", f"of collection {name!r}", "is missing: its vectors cannot be stored")
        for _, name in conn.execute(Q.partitions_missing).fetchall()
    ]
    orphans, misfiled = conn.execute(Q.stray_vectors).fetchone()
    if orphans:
        out.append(
            Drift(
                "vectors",
                "of pgrag.chunk_embeddings",
                f"{orphans} have no chunk or no model (left by a delete in REPEATABLE READ or"
                " SERIALIZABLE racing a write of them, or by writes with triggers off); they"
                " take the place of real results in searches",
            )
        )
    if misfiled:
        out.append(
            Drift(
                "vectors",
                "of pgrag.chunk_embeddings",
                f"{misfiled} are filed under another collection than their chunk's",
            )
        )
    out += [
        Drift(
            "partition",
            f"pgrag.{name}",
            f"is granted to {', '.join(grantees)}: a partition has no row-level security of its"
            " own, so that shows every row of its collection",
        )
        for name, grantees in conn.execute(Q.partition_grants).fetchall()
    ]
    return out


def _owners(conn: Any) -> list[Drift]:
    reference, others, most = owner(conn)
    if most is not None:
        n = sum(1 for _, _, who in others if who == most)
        return [
            Drift(
                "owner of",
                "schema pgrag",
                f"is {reference}, but {most} owns {n} of its objects: one of them was given"
                " pgrag's objects by hand",
                repairable=False,
                fix="a superuser decides which role is pgrag's owner and gives it the schema,"
                " every object in it and pgrag's version table (ALTER SCHEMA pgrag OWNER TO ...;"
                " ALTER ... OWNER TO ...; ALTER TABLE ....alembic_version_pgrag OWNER TO ...)",
            )
        ]
    return [
        Drift(
            "owner of",
            f"{kind} {name}",
            f"is {who}, not {reference} (who owns schema pgrag)",
            fix=f"its owner or a superuser can run ALTER {kind.upper()} ... OWNER TO {reference}",
        )
        for kind, name, who in others
    ]


def _roles(conn: Any, roles: set[str]) -> list[Drift]:
    out: list[Drift] = []
    for role in ROLES:
        if role not in roles:
            out.append(
                Drift(
                    "role",
                    role,
                    "does not exist: roles meant to use it cannot use pgrag",
                    repairable=False,
                    fix=f"an administrator runs CREATE ROLE {role} NOLOGIN, then"
                    " SELECT pgrag.grant_roles()",
                )
            )
    (running_as_superuser,) = conn.execute(Q.running_as_superuser).fetchone()
    for role, superuser, bypassrls, writer, owns in conn.execute(
        fingerprint.Q.role_attributes
    ).fetchall():
        why = [
            what for what, flag in (("a superuser", superuser), ("BYPASSRLS", bypassrls)) if flag
        ]
        if role in RESTRICTED and not superuser:  # (a superuser is a member of every role)
            why += ["a member of pgrag_writer"] * bool(writer)
            why += ["a member of the owner of schema pgrag"] * bool(owns)
        if why:
            out.append(
                Drift(
                    "role",
                    role,
                    f"is {' and '.join(why)}, so it reads everything",
                    repairable=bool(running_as_superuser),
                    fix=None
                    if running_as_superuser
                    else "a superuser takes that away (ALTER ROLE ... NOSUPERUSER NOBYPASSRLS;"
                    " REVOKE ... FROM ... GRANTED BY whoever granted it, or revoke the role in"
                    " between); `pgrag db repair` run as one does what it can",
                )
            )
    return out


def check_database(dsn: str) -> list[Drift]:
    """:func:`check` on a new connection to ``dsn``; changes nothing."""
    with open_connection(dsn) as conn:
        who = schema.running(conn)
        try:
            return check(conn)
        except Exception as err:
            explained = schema.explain(err, "check", who)
            if explained is None:
                raise
            raise explained from err
        finally:
            conn.rollback()
