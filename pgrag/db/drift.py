"""``pgrag db check`` and ``pgrag db repair``: the live schema against what this release installs.

:func:`check` compares the database with this release: its revision, its functions' digest,
and the fingerprint (:mod:`pgrag.db.fingerprint`) of every function, table, column,
constraint, index, trigger, policy and privilege of schema pgrag; then whether each model in
use has a valid HNSW index, whether the schema owner owns every object, and whether any chunk
lacks a vector nothing would ever compute. Each difference is a :class:`Drift`, named.

:func:`repair` makes the database what this release installs, in one transaction: it
re-applies every function, re-creates what is missing or different (indexes, constraints,
triggers, policies and row-level security, from the definitions the fingerprint holds),
drops what pgrag did not create in its schema (functions, triggers, policies, constraints,
indexes, views) and revokes privileges it did not grant, rebuilds missing model indexes and
queues chunks without vectors. What it cannot restore (a dropped column, data) it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgrag.db import fingerprint, queries, roundtrip, schema
from pgrag.db.connect import open_connection
from pgrag.errors import SchemaNotReady

Q = queries.load(__name__)

ROLES = ("pgrag_reader", "pgrag_writer", "pgrag_app")


BACKUP = "not repairable: restore it from a backup, or downgrade and upgrade"


@dataclass(frozen=True)
class Drift:
    kind: str  # function, table, column, constraint, index, trigger, policy, grant, ...
    name: str
    problem: str
    repairable: bool = True
    fix: str | None = None  # what to do when `pgrag db repair` cannot

    def describe(self) -> str:
        fix = "" if self.repairable or not self.fix else f" ({self.fix})"
        return f"{self.kind} {self.name}: {self.problem}{fix}"


def _for_roles(grants: list[str], roles: set[str]) -> set[str]:
    """The grants whose grantee exists here (PUBLIC always does)."""
    return {g for g in grants if g.split(" ", 1)[0] not in ROLES or g.split(" ", 1)[0] in roles}


def compare(
    expected: dict[str, Any], live: dict[str, Any], roles: set[str], *, functions: bool = True
) -> list[Drift]:
    """Every difference between two fingerprints, as drifts (``functions=False`` leaves the
    function bodies out, when they are known to be another release's)."""
    out: list[Drift] = []

    def objects(section: str, kind: str, what: dict[str, str] | None = None) -> None:
        exp, got = expected.get(section, {}), live.get(section, {})
        for name in sorted(set(exp) | set(got)):
            if name not in got:
                out.append(Drift(kind, name, "missing"))
            elif name not in exp:
                out.append(Drift(kind, name, "not part of pgrag (unexpected)"))
            elif exp[name] != got[name]:
                if isinstance(exp[name], dict) and what:
                    for key, problem in what.items():
                        if exp[name].get(key) != got[name].get(key):
                            out.append(Drift(kind, name, problem))
                            break
                    else:
                        out.append(Drift(kind, name, "differs from this release"))
                else:
                    out.append(Drift(kind, name, "differs from this release"))

    if functions:
        objects("functions", "function", None)
    objects("constraints", "constraint", {"validated": "not validated"})
    objects("indexes", "index", {"valid": "invalid (an interrupted build?)"})
    objects("triggers", "trigger", {"enabled": "disabled or in another firing mode"})
    objects("policies", "policy")
    objects("types", "type")
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
                    else "drop it, or move it out of schema pgrag, if it is not"
                    " pgrag's; repair revokes what pgrag's roles were granted on it",
                )
            )
        else:
            e, g = exp_rel[name], got_rel[name]
            if e["rls"] != g["rls"]:
                state = "enabled" if e["rls"] else "disabled"
                out.append(Drift("row-level security", name, f"should be {state}"))
            if e["force_rls"] != g["force_rls"]:
                out.append(Drift("row-level security", name, "FORCE differs from this release"))
    for table in sorted(set(expected["columns"]) & set(live["columns"])):
        if expected["columns"][table] != live["columns"][table]:
            out.append(
                Drift("columns of", table, "differ from this release", repairable=False, fix=BACKUP)
            )
    present = {
        "function_grants": set(live.get("functions", {})) | set(expected.get("functions", {})),
        "relation_grants": set(live["relations"]),
        "column_grants": {f"{t}.{c[0]}" for t, cols in live["columns"].items() for c in cols},
    }
    for section, kind in (
        ("function_grants", "function"),
        ("relation_grants", "relation"),
        ("column_grants", "column"),
    ):
        exp, got = expected.get(section, {}), live.get(section, {})
        for name in sorted(set(exp) | set(got)):
            if name not in present[section]:
                continue  # the object itself is missing: reported above
            want = _for_roles(exp.get(name, []), roles)
            have = set(got.get(name, []))
            for g in sorted(want - have):
                grantee, privilege = g.split(" ", 1)
                out.append(Drift("grant", f"{privilege} on {kind} {name}", f"{grantee} lacks it"))
            for g in sorted(have - want):
                grantee, privilege = g.split(" ", 1)
                out.append(
                    Drift(
                        "grant", f"{privilege} on {kind} {name}", f"{grantee} has it (unexpected)"
                    )
                )
    want = _for_roles(expected.get("schema_grants", []), roles)
    have = set(live.get("schema_grants", []))
    for g in sorted(want - have):
        out.append(
            Drift("grant", f"{g.split(' ', 1)[1]} on schema pgrag", f"{g.split()[0]} lacks it")
        )
    for g in sorted(have - want):
        out.append(
            Drift(
                "grant",
                f"{g.split(' ', 1)[1]} on schema pgrag",
                f"{g.split()[0]} has it (unexpected)",
            )
        )
    return out


def check(conn: Any) -> list[Drift]:
    """Everything in which the database differs from this release (empty: none)."""
    st = schema.state_of(conn)
    if not st.revision_current:
        return [Drift("schema", "revision", st.describe(), repairable=False)]
    out: list[Drift] = []
    if not st.functions_current:
        newer = st.functions_newer
        out.append(Drift("functions", "of schema pgrag", st.describe(), repairable=not newer))
    live = fingerprint.take(conn)
    roles = fingerprint.existing_roles(conn)
    out += compare(fingerprint.expected(), live, roles, functions=st.functions_current)
    for model_id, name, index, valid in conn.execute(Q.model_indexes).fetchall():
        if not valid:
            out.append(
                Drift("index", f"{index} (model {name}, id {model_id})", "missing or invalid")
            )
    for what, owner, schema_owner in conn.execute(fingerprint.Q.foreign_owners).fetchall():
        out.append(
            Drift(
                "owner of",
                what,
                f"is {owner}, not {schema_owner} (the owner of schema pgrag)",
                repairable=False,
                fix=f"its owner or a superuser can run ALTER ... OWNER TO {schema_owner}",
            )
        )
    for collection, model, n in conn.execute(Q.unqueued).fetchall():
        out.append(
            Drift(
                "chunks of",
                f"collection {collection!r}",
                f"{n} have no vector of model {model} and are not queued for one",
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


def repair_database(dsn: str) -> tuple[list[str], list[Drift]]:
    """:func:`repair` on ``dsn`` in one transaction, under the migration lock; returns what it
    did and what still differs afterwards (what no repair can restore)."""
    with open_connection(dsn) as conn, schema.locked(dsn):
        done = repair(conn)
        left = check(conn)
        conn.commit()
    return done, left


def repair(conn: Any) -> list[str]:
    """Make schema pgrag this release's, in the caller's transaction; returns what it did."""
    from psycopg import sql

    st = schema.state_of(conn)
    if not st.revision_current or st.functions_newer:
        raise SchemaNotReady(st.describe() + "; `pgrag db repair` works on this release's schema")
    done: list[str] = []

    def run(what: str, query: str, **parts: Any) -> None:
        # (A definition from the fingerprint is run as it is: it may hold braces.)
        conn.execute(sql.SQL(query).format(**parts) if parts else sql.SQL(query))
        done.append(what)

    expected = fingerprint.expected()
    roles = fingerprint.existing_roles(conn)
    schema.apply_functions(conn)
    done.append("re-applied every function of sql/functions/ and granted pgrag's roles")
    live = fingerprint.take(conn)

    for sig in sorted(set(live["functions"]) - set(expected["functions"])):
        run(f"dropped function {sig}", Q.drop_function, function=sql.SQL(sig))
    for name in sorted(set(live["triggers"]) - set(expected["triggers"])):
        table, trigger = _split(name)
        run(f"dropped trigger {name}", Q.drop_trigger, trigger=sql.Identifier(trigger), table=table)
    for name, want in sorted(expected["triggers"].items()):
        got = live["triggers"].get(name)
        table, trigger = _split(name)
        if got is None or got["definition"] != want["definition"]:
            conn.execute(
                sql.SQL(Q.drop_trigger).format(trigger=sql.Identifier(trigger), table=table)
            )
            run(f"re-created trigger {name}", want["definition"])
            got = {"enabled": "O"}
        if got["enabled"] != want["enabled"]:
            mode = {
                "O": Q.enable_trigger,
                "A": Q.enable_always_trigger,
                "R": Q.enable_replica_trigger,
                "D": Q.disable_trigger,
            }[want["enabled"]]
            run(f"enabled trigger {name}", mode, trigger=sql.Identifier(trigger), table=table)

    for name in sorted(set(live["policies"]) - set(expected["policies"])):
        table, policy = _split(name)
        run(f"dropped policy {name}", Q.drop_policy, policy=sql.Identifier(policy), table=table)
    for name, want in sorted(expected["policies"].items()):
        if live["policies"].get(name) == want:
            continue
        table, policy = _split(name)
        conn.execute(sql.SQL(Q.drop_policy).format(policy=sql.Identifier(policy), table=table))
        run(
            f"re-created policy {name}",
            Q.create_policy,
            policy=sql.Identifier(policy),
            table=table,
            **_policy_parts(want),
        )
    for name, want in sorted(expected["relations"].items()):
        got = live["relations"].get(name)
        if got is None:
            continue
        table = _relation(name)
        if got["rls"] != want["rls"]:
            query = Q.enable_rls if want["rls"] else Q.disable_rls
            run(
                f"{'enabled' if want['rls'] else 'disabled'} row-level security on {name}",
                query,
                table=table,
            )
        if got["force_rls"] != want["force_rls"]:
            query = Q.force_rls if want["force_rls"] else Q.no_force_rls
            run(f"set FORCE ROW LEVEL SECURITY on {name} as released", query, table=table)

    for name in sorted(set(live["constraints"]) - set(expected["constraints"])):
        table, constraint = _split(name)
        run(
            f"dropped constraint {name}",
            Q.drop_constraint,
            table=table,
            constraint=sql.Identifier(constraint),
        )
    for name, want in sorted(expected["constraints"].items()):
        got = live["constraints"].get(name)
        table, constraint = _split(name)
        if got is None or got["definition"] != want["definition"]:
            conn.execute(
                sql.SQL(Q.drop_constraint).format(
                    table=table, constraint=sql.Identifier(constraint)
                )
            )
            run(
                f"re-created constraint {name}",
                Q.add_constraint,
                table=table,
                constraint=sql.Identifier(constraint),
                definition=sql.SQL(want["definition"]),
            )
        elif got["validated"] != want["validated"]:
            run(
                f"validated constraint {name}",
                Q.validate_constraint,
                table=table,
                constraint=sql.Identifier(constraint),
            )

    for name in sorted(set(live["indexes"]) - set(expected["indexes"])):
        run(f"dropped index {name}", Q.drop_index, index=_relation(name))
    for name, want in sorted(expected["indexes"].items()):
        got = live["indexes"].get(name)
        if got == want:
            continue
        if got is not None:
            conn.execute(sql.SQL(Q.drop_index).format(index=_relation(name)))
        run(f"re-created index {name}", want["definition"])

    for name, got in sorted(live["relations"].items()):
        if name in expected["relations"]:
            continue
        if got["kind"] in ("v", "m"):
            run(f"dropped view {name}", Q.drop_view, relation=_relation(name))

    live = fingerprint.take(conn)  # what the steps above left, for the privileges
    _revoke(conn, expected, live, roles, done)
    conn.execute(schema.Q.grant_roles)

    for model_id, name, index, valid in conn.execute(Q.model_indexes).fetchall():
        if not valid:
            conn.execute(Q.ensure_model_index, {"model_id": model_id})
            done.append(f"built {index} (model {name})")
    queued = roundtrip.requeue(conn)
    if queued:
        done.append(f"queued {queued} (chunk, model) pairs without a vector for pgrag worker")
    return done


def _revoke(
    conn: Any, expected: dict[str, Any], live: dict[str, Any], roles: set[str], done: list[str]
) -> None:
    from psycopg import sql

    def grantee(name: str) -> sql.Composable:
        return sql.SQL("PUBLIC") if name == "PUBLIC" else sql.Identifier(name)

    kinds = {name: rel["kind"] for name, rel in live["relations"].items()}
    for section in ("function_grants", "relation_grants", "column_grants"):
        for name, grants in sorted(live[section].items()):
            extra = set(grants) - _for_roles(expected.get(section, {}).get(name, []), roles)
            for g in sorted(extra):
                who, privilege = g.split(" ", 1)
                parts: dict[str, Any] = {"privilege": sql.SQL(privilege), "grantee": grantee(who)}
                if section == "function_grants":
                    query, parts["function"] = Q.revoke_function, sql.SQL(name)
                elif section == "column_grants":
                    relation, column = name.rsplit(".", 1)
                    query = Q.revoke_column
                    parts["relation"], parts["column"] = _relation(relation), sql.Identifier(column)
                else:
                    query = Q.revoke_sequence if kinds.get(name) == "S" else Q.revoke_relation
                    parts["relation"] = _relation(name)
                conn.execute(sql.SQL(query).format(**parts))
                done.append(f"revoked {privilege} on {name} from {who}")
    for g in sorted(set(live["schema_grants"]) - _for_roles(expected["schema_grants"], roles)):
        who, privilege = g.split(" ", 1)
        conn.execute(
            sql.SQL(Q.revoke_schema).format(privilege=sql.SQL(privilege), grantee=grantee(who))
        )
        done.append(f"revoked {privilege} on schema pgrag from {who}")


def _relation(name: str) -> Any:
    from psycopg import sql

    schema_name, _, relation = name.partition(".")
    return sql.Identifier(schema_name, relation)


def _split(name: str) -> tuple[Any, str]:
    """'pgrag.chunks.chunks_acl' -> (pgrag.chunks as an identifier, 'chunks_acl')."""
    schema_name, table, rest = name.split(".", 2)
    return _relation(f"{schema_name}.{table}"), rest


def _policy_parts(policy: dict[str, Any]) -> dict[str, Any]:
    from psycopg import sql

    commands = {"*": "ALL", "r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE"}
    roles = sql.SQL(", ").join(
        sql.SQL("PUBLIC") if r == "public" else sql.Identifier(r) for r in policy["roles"]
    )
    using = (
        sql.SQL("USING ({})").format(sql.SQL(policy["using"])) if policy["using"] else sql.SQL("")
    )
    check = (
        sql.SQL("WITH CHECK ({})").format(sql.SQL(policy["check"]))
        if policy["check"]
        else sql.SQL("")
    )
    return {
        "permissive": sql.SQL("PERMISSIVE" if policy["permissive"] else "RESTRICTIVE"),
        "command": sql.SQL(commands[policy["command"]]),
        "roles": roles,
        "using": using,
        "check": check,
    }
