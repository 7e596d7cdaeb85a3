"""``pgrag db repair``: make schema pgrag what this release installs.

:func:`repair`, in one transaction: re-applies every function; re-creates what is missing or
different (triggers, policies, constraints, indexes, from the definitions the fingerprint
holds; column defaults and NOT NULL); switches row-level security, triggers (the foreign keys'
too) and logging back on; drops what pgrag did not create in its schema (functions, triggers,
rules, policies, constraints, indexes, views, operators) and detaches tables that inherit from
its tables; revokes privileges and default privileges it did not grant; rebuilds model indexes
that are missing, invalid or built otherwise, and drops those of no model in use; gives objects
back to the role that owns the rest and takes away what lets a restricted role read everything
(where the role running it may); queues chunks without vectors. What it cannot restore (a
dropped column, data) :func:`pgrag.db.drift.check` still names afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgrag.db import drift, fingerprint, queries, roundtrip, schema
from pgrag.db.dsn import open_connection
from pgrag.errors import SchemaNotReady

Q = queries.load(__name__)

_KINDS = {
    "function": "FUNCTION",
    "table": "TABLE",
    "sequence": "SEQUENCE",
    "view": "VIEW",
    "schema": "SCHEMA",
}
_OBJECTS = {"r": "TABLES", "S": "SEQUENCES", "f": "FUNCTIONS", "T": "TYPES", "n": "SCHEMAS"}


def repair_database(dsn: str, *, force: bool = False) -> tuple[list[str], list[drift.Drift]]:
    """:func:`repair` on ``dsn`` in one transaction, under the migration lock; returns what it
    did and what still differs afterwards (what no repair can restore)."""
    with open_connection(dsn) as conn, schema.locked(dsn):
        if schema.state_of(conn).revision_current:
            schema.lock_tables(conn)  # (repair refuses other revisions itself)
        done = repair(conn, force=force)
        left = drift.check(conn)
        conn.commit()
    return done, left


def repair(conn: Any, *, force: bool = False) -> list[str]:
    """Make schema pgrag this release's, in the caller's transaction; returns what it did.
    Refuses a database whose functions say they are a newer release's, unless ``force``."""
    from psycopg import sql

    st = schema.state_of(conn)
    if not st.revision_current:
        raise SchemaNotReady(st.describe() + "; `pgrag db repair` works on the current revision")
    if st.functions_newer and not force:
        raise SchemaNotReady(
            st.describe() + "; `pgrag db repair --force` puts this release's functions back if"
            " no newer release ran here (pgrag.release() says so, and nothing verifies it)"
        )
    done: list[str] = []

    def run(what: str, query: str, **parts: Any) -> None:
        # (A definition from the fingerprint is run as it is: it may hold braces.)
        conn.execute(sql.SQL(query).format(**parts) if parts else sql.SQL(query))
        done.append(what)

    def attempt(what: str, query: str, **parts: Any) -> None:
        """What the running role may lack the right to do: tried in a savepoint."""
        import psycopg

        try:
            with conn.transaction():
                run(what, query, **parts)
        except psycopg.errors.InsufficientPrivilege as err:
            done.append(f"not done, for lack of the right: {what} ({err.diag.message_primary})")

    expected = fingerprint.expected()
    roles = fingerprint.existing_roles(conn)
    schema.apply_functions(conn)
    done.append("re-applied every function of sql/functions/ and granted pgrag's roles")
    live = fingerprint.take(conn)
    _unexpected(run, expected, live)
    _triggers(conn, run, attempt, expected, live)
    _policies(conn, run, expected, live)
    _relations(run, attempt, expected, live)
    _constraints(conn, run, expected, live)
    _indexes(conn, run, expected, live)
    _columns(run, expected, live)
    live = fingerprint.take(conn)  # what the steps above left, for the privileges
    _privileges(conn, expected, live, roles, done)
    conn.execute(schema.Q.grant_roles)
    _model_indexes(conn, run, done)
    _owners(conn, attempt)
    _roles(conn, attempt)
    queued = roundtrip.requeue(conn)
    if queued:
        done.append(f"queued {queued} (chunk, model) pairs without a vector for pgrag worker")
    return done


Run = Callable[..., None]


def _unexpected(run: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name in sorted(set(live["rules"]) - set(expected.get("rules", {}))):
        table, rule = _split(name)
        run(f"dropped rule {name}", Q.drop_rule, rule=sql.Identifier(rule), table=table)
    for name in sorted(set(live["triggers"]) - set(expected["triggers"])):
        table, trigger = _split(name)
        run(f"dropped trigger {name}", Q.drop_trigger, trigger=sql.Identifier(trigger), table=table)
    for sig in sorted(set(live["functions"]) - set(expected["functions"])):
        run(f"dropped function {sig}", Q.drop_function, function=sql.SQL(sig))
    for operator in sorted(set(live["operators"]) - set(expected.get("operators", []))):
        run(f"dropped operator {operator}", Q.drop_operator, operator=sql.SQL(operator))
    for child, parent in sorted(live["children"].items()):
        if child not in expected.get("children", {}):
            run(
                f"detached {child} from {parent}",
                Q.no_inherit,
                child=_qualified(child),
                parent=_relation(parent),
            )
    for name, got in sorted(live["relations"].items()):
        if name not in expected["relations"] and got["kind"] in ("v", "m"):
            run(f"dropped view {name}", Q.drop_view, relation=_relation(name))


def _triggers(
    conn: Any, run: Run, attempt: Run, expected: dict[str, Any], live: dict[str, Any]
) -> None:
    from psycopg import sql

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
    for table in sorted(live["disabled_internal_triggers"]):
        attempt(
            f"enabled the foreign keys' triggers on {table}",
            Q.enable_all_triggers,
            table=_relation(table),
        )


def _policies(conn: Any, run: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

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


def _relations(run: Run, attempt: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    for name, want in sorted(expected["relations"].items()):
        got = live["relations"].get(name)
        if got is None:
            continue
        table = _relation(name)
        if got["rls"] != want["rls"]:
            state = "enabled" if want["rls"] else "disabled"
            run(
                f"{state} row-level security on {name}",
                Q.enable_rls if want["rls"] else Q.disable_rls,
                table=table,
            )
        if got["force_rls"] != want["force_rls"]:
            run(
                f"set FORCE ROW LEVEL SECURITY on {name} as released",
                Q.force_rls if want["force_rls"] else Q.no_force_rls,
                table=table,
            )
        if got.get("persistence") != want.get("persistence"):
            attempt(f"made {name} logged again", Q.set_logged, table=table)


def _constraints(conn: Any, run: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

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
        ident = sql.Identifier(constraint)
        if got is None or got["definition"] != want["definition"]:
            conn.execute(sql.SQL(Q.drop_constraint).format(table=table, constraint=ident))
            run(
                f"re-created constraint {name}",
                Q.add_constraint,
                table=table,
                constraint=ident,
                definition=sql.SQL(want["definition"]),
            )
        elif got["validated"] != want["validated"]:
            run(
                f"validated constraint {name}", Q.validate_constraint, table=table, constraint=ident
            )


def _indexes(conn: Any, run: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name in sorted(set(live["indexes"]) - set(expected["indexes"])):
        run(f"dropped index {name}", Q.drop_index, index=_relation(name))
    for name, want in sorted(expected["indexes"].items()):
        got = live["indexes"].get(name)
        if got == want:
            continue
        if got is not None:
            conn.execute(sql.SQL(Q.drop_index).format(index=_relation(name)))
        run(f"re-created index {name}", want["definition"])


def _columns(run: Run, expected: dict[str, Any], live: dict[str, Any]) -> None:
    """Defaults and NOT NULL back as released (the other attributes would touch data)."""
    from psycopg import sql

    for table in sorted(set(expected["columns"]) & set(live["columns"])):
        got = {c[0]: c for c in live["columns"][table]}
        for name, _type, notnull, default, *_ in expected["columns"][table]:
            have = got.get(name)
            if have is None:
                continue
            parts = {"table": _relation(table), "column": sql.Identifier(name)}
            if have[3] != default:
                if default is None:
                    run(f"dropped the default of {table}.{name}", Q.drop_default, **parts)
                else:
                    run(
                        f"set the default of {table}.{name} back",
                        Q.set_default,
                        default=sql.SQL(default),
                        **parts,
                    )
            if have[2] != notnull:
                query = Q.set_not_null if notnull else Q.drop_not_null
                run(f"set NOT NULL on {table}.{name} as released", query, **parts)


def _privileges(
    conn: Any, expected: dict[str, Any], live: dict[str, Any], roles: set[str], done: list[str]
) -> None:
    """Revoke what pgrag did not grant; grant what it did and is gone (a PUBLIC EXECUTE that
    re-applying a function does not give back, say)."""
    from psycopg import sql

    def grantee(name: str) -> sql.Composable:
        return sql.SQL("PUBLIC") if name == "PUBLIC" else sql.Identifier(name)

    statements = {
        ("revoke", "function"): Q.revoke_function,
        ("revoke", "column"): Q.revoke_column,
        ("revoke", "sequence"): Q.revoke_sequence,
        ("revoke", "relation"): Q.revoke_relation,
        ("grant", "function"): Q.grant_function,
        ("grant", "column"): Q.grant_column,
        ("grant", "sequence"): Q.grant_sequence,
        ("grant", "relation"): Q.grant_relation,
    }
    kinds = {name: rel["kind"] for name, rel in live["relations"].items()}
    present = {
        "function_grants": set(live["functions"]),
        "relation_grants": set(live["relations"]),
        "column_grants": {f"{t}.{c[0]}" for t, cols in live["columns"].items() for c in cols},
    }
    for section in ("function_grants", "relation_grants", "column_grants"):
        exp, got = expected.get(section, {}), live[section]
        for name in sorted((set(exp) | set(got)) & present[section]):
            want, have = drift.for_roles(exp.get(name, []), roles), set(got.get(name, []))
            for g, revoke in sorted(
                [(g, True) for g in have - want] + [(g, False) for g in want - have]
            ):
                who, privilege = g.split(" ", 1)
                verb = "revoke" if revoke else "grant"
                parts: dict[str, Any] = {"privilege": sql.SQL(privilege), "grantee": grantee(who)}
                if section == "function_grants":
                    what, parts["function"] = "function", sql.SQL(name)
                elif section == "column_grants":
                    relation, column = name.rsplit(".", 1)
                    what = "column"
                    parts["relation"], parts["column"] = _relation(relation), sql.Identifier(column)
                else:
                    what = "sequence" if kinds.get(name) == "S" else "relation"
                    parts["relation"] = _relation(name)
                conn.execute(sql.SQL(statements[verb, what]).format(**parts))
                way = "from" if revoke else "to"
                done.append(f"{verb}d {privilege} on {name} {way} {who}")
    for g in sorted(set(live["schema_grants"]) - drift.for_roles(expected["schema_grants"], roles)):
        who, privilege = g.split(" ", 1)
        conn.execute(
            sql.SQL(Q.revoke_schema).format(privilege=sql.SQL(privilege), grantee=grantee(who))
        )
        done.append(f"revoked {privilege} on schema pgrag from {who}")
    for entry in sorted(
        set(live["default_privileges"]) - set(expected.get("default_privileges", []))
    ):
        role, objects, who, privilege = entry.split(" ", 3)
        conn.execute(
            sql.SQL(Q.revoke_default).format(
                role=sql.Identifier(role),
                privilege=sql.SQL(privilege),
                objects=sql.SQL(_OBJECTS[objects]),
                grantee=grantee(who),
            )
        )
        done.append(
            f"revoked the default {privilege} on new {_OBJECTS[objects].lower()} from {who}"
        )


def _model_indexes(conn: Any, run: Run, done: list[str]) -> None:
    from psycopg import sql

    wrong = {d.name.split(" ", 1)[0] for d in drift._model_indexes(conn)}
    for (index,) in conn.execute(drift.Q.stray_model_indexes).fetchall():
        run(f"dropped {index} (no model a collection uses)", Q.drop_index, index=_relation(index))
        wrong.discard(index)
    for row in conn.execute(drift.Q.model_indexes).fetchall():
        model_id, name, index = row[:3]
        if index in wrong:
            conn.execute(sql.SQL(Q.drop_index).format(index=_relation(index)))
            conn.execute(Q.ensure_model_index, {"model_id": model_id})
            done.append(f"built {index} (model {name})")


def _owners(conn: Any, attempt: Run) -> None:
    from psycopg import sql

    expected, others = drift.owner(conn)
    for kind, name, who in others:
        target = sql.Identifier(name) if kind == "schema" else sql.SQL(name)
        if kind not in ("function", "schema"):
            target = _relation(name)
        attempt(
            f"gave {kind} {name} back to {expected} (from {who})",
            Q.set_owner,
            kind=sql.SQL(_KINDS[kind]),
            object=target,
            owner=sql.Identifier(expected),
        )


def _roles(conn: Any, attempt: Run) -> None:
    from psycopg import sql

    for role, superuser, bypassrls, writer, owns in conn.execute(
        fingerprint.Q.role_attributes
    ).fetchall():
        ident = sql.Identifier(role)
        if superuser:
            attempt(
                f"made {role} NOSUPERUSER",
                Q.alter_role,
                role=ident,
                attribute=sql.SQL("NOSUPERUSER"),
            )
        if bypassrls:
            attempt(
                f"made {role} NOBYPASSRLS",
                Q.alter_role,
                role=ident,
                attribute=sql.SQL("NOBYPASSRLS"),
            )
        if role in drift.RESTRICTED and writer:
            attempt(
                f"revoked pgrag_writer from {role}",
                Q.revoke_role,
                granted=sql.Identifier("pgrag_writer"),
                role=ident,
            )
        if role in drift.RESTRICTED and owns:
            owner_role = drift.owner(conn)[0]
            attempt(
                f"revoked {owner_role} from {role}",
                Q.revoke_role,
                granted=sql.Identifier(owner_role),
                role=ident,
            )


def _relation(name: str) -> Any:
    from psycopg import sql

    schema_name, _, relation = name.partition(".")
    return sql.Identifier(schema_name, relation)


def _qualified(name: str) -> Any:
    """A relation named as regclass text writes it: schema.name, or a bare name."""
    from psycopg import sql

    return _relation(name) if "." in name else sql.Identifier(name)


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
