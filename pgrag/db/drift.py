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
BACKUP = "not repairable: restore it from a backup, or downgrade and upgrade"
# Column attributes in a fingerprint, and which of them repair sets back (the others would
# rewrite or lose data).
COLUMN = ("type", "not null", "default", "identity", "generated", "collation")
REPAIRABLE_COLUMN = {"not null", "default"}


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
    out += _relations(expected, live)
    out += _columns(expected, live)
    out += _grants(expected, live, roles)
    return out


_OBJECTS = {"r": "tables", "S": "sequences", "f": "functions", "T": "types", "n": "schemas"}


def _relations(expected: dict[str, Any], live: dict[str, Any]) -> list[Drift]:
    out: list[Drift] = []
    exp_rel, got_rel = expected["relations"], live["relations"]
    for name in sorted(set(exp_rel) | set(got_rel)):
        if name not in got_rel:
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


def _grants(expected: dict[str, Any], live: dict[str, Any], roles: set[str]) -> list[Drift]:
    out: list[Drift] = []
    present = {
        "function_grants": set(live.get("functions", {})) | set(expected.get("functions", {})),
        "relation_grants": set(live["relations"]),
        "column_grants": {f"{t}.{c[0]}" for t, cols in live["columns"].items() for c in cols},
    }
    sections = (
        ("function_grants", "function"),
        ("relation_grants", "relation"),
        ("column_grants", "column"),
    )
    for section, kind in sections:
        exp, got = expected.get(section, {}), live.get(section, {})
        for name in sorted(set(exp) | set(got)):
            if name not in present[section]:
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


def owner(conn: Any) -> tuple[str, list[tuple[str, str, str]]]:
    """The role that owns pgrag's objects (most of them), and each object another role owns
    as (kind, name, its owner)."""
    rows = [tuple(r) for r in conn.execute(fingerprint.Q.owners).fetchall()]
    expected = Counter(r[2] for r in rows if r[0] != "schema").most_common(1)[0][0]
    return expected, [r for r in rows if r[2] != expected]


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
    out += _model_indexes(conn)
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


def _model_indexes(conn: Any) -> list[Drift]:
    out: list[Drift] = []
    for row in conn.execute(Q.model_indexes).fetchall():
        model_id, name, index, valid, method, opclass, want_opclass, expr, want_type = row[:9]
        predicate, want_predicate = row[9:]
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
    for (index,) in conn.execute(Q.stray_model_indexes).fetchall():
        out.append(Drift("index", index, "belongs to no model a collection uses"))
    return out


def _owners(conn: Any) -> list[Drift]:
    expected, others = owner(conn)
    return [
        Drift(
            "owner of",
            f"{kind} {name}",
            f"is {who}, not {expected} (who owns pgrag's other objects)",
            fix=f"its owner or a superuser can run ALTER {kind.upper()} ... OWNER TO {expected}",
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
    for role, superuser, bypassrls, writer, owns in conn.execute(
        fingerprint.Q.role_attributes
    ).fetchall():
        why = [
            what for what, flag in (("a superuser", superuser), ("BYPASSRLS", bypassrls)) if flag
        ]
        if role in RESTRICTED:
            why += ["a member of pgrag_writer"] * bool(writer)
            why += ["a member of the owner of schema pgrag"] * bool(owns)
        if why:
            out.append(
                Drift(
                    "role",
                    role,
                    f"is {' and '.join(why)}, so it reads everything",
                    fix="an administrator (or a role with CREATEROLE) takes that away",
                )
            )
    return out


def check_database(dsn: str) -> list[Drift]:
    """:func:`check` on a new connection to ``dsn``; changes nothing."""
    with open_connection(dsn) as conn:
        try:
            return check(conn)
        finally:
            conn.rollback()
