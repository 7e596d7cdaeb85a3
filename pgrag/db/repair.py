"""``pgrag db repair``: make schema pgrag what this release installs.

:func:`repair`, in one transaction: re-applies every function; re-creates what is missing or
different (triggers, policies, constraints, indexes, from the definitions the fingerprint
holds; column defaults, NOT NULL and identity; sequences' definitions and positions); switches
row-level security, triggers (the foreign keys' too), logging, replica identity and storage
options back; drops what pgrag did not create in its schema (functions, triggers, rules,
policies, constraints, indexes, views, operators) and detaches tables that inherit from its
tables; revokes privileges and default privileges it did not grant and grants back what it
did; rebuilds model indexes that are missing, invalid or built otherwise, and drops those of no
model in use; gives objects back to the owner of schema pgrag and takes away what lets a
restricted role read everything (where the running role may); queues chunks without vectors.

Each of these is a step of its own, in a savepoint: one that fails (a row that breaks a
constraint being re-added, a view of the user's that needs a function being dropped, a right
the running role lacks, a warning that nothing was granted or revoked) is reported as
``not done: ...`` with the server's reason, and the others still happen. What no repair can
restore (a dropped column, data) :func:`pgrag.db.drift.check` still names afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
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
}
_OBJECTS = {"r": "TABLES", "S": "SEQUENCES", "f": "FUNCTIONS", "T": "TYPES", "n": "SCHEMAS"}
_OPTION = re.compile(r"^[a-z_][a-z0-9_.]*$")


def repair_database(
    dsn: str, *, force: bool = False, on_wait: Callable[[str], None] | None = None
) -> tuple[list[str], list[drift.Drift]]:
    """:func:`repair` on ``dsn`` in one transaction, under the migration lock and with pgrag's
    tables locked; returns what it did and what still differs afterwards (what no repair can
    restore). A database where nothing differs is left alone: no lock, nothing re-applied.
    ``on_wait(line)`` says what it waits for when a lock is held by another session (after
    about 2 s, naming the session)."""
    from pgrag.db.waits import watching

    with (
        open_connection(dsn) as conn,
        watching(dsn, conn.info.backend_pid, on_wait),
        schema.locked(dsn),
    ):
        who = schema.running(conn)
        try:
            # (a deleted collection's partition is no difference, but repair drops it; a
            # schema at another revision differs, so the query runs only on this one's)
            if not drift.check(conn) and not conn.execute(drift.Q.partitions_orphaned).fetchone():
                conn.rollback()
                return [], []
            if schema.state_of(conn).revision_current:
                schema.lock_tables(conn)  # (repair refuses other revisions itself)
            done = repair(conn, force=force)
            left = drift.check(conn)
            conn.commit()
        except Exception as err:
            explained = schema.explain(err, "repair", who)
            if explained is None:
                raise
            raise explained from err
    return done, left


class _Steps:
    """Runs each repair in a savepoint of the caller's transaction and keeps the account."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.done: list[str] = []
        self._warnings: list[str] | None = None
        conn.add_notice_handler(self._notice)

    def _notice(self, diag: Any) -> None:
        if self._warnings is not None and diag.severity_nonlocalized == "WARNING":
            self._warnings.append(diag.message_primary or "")

    def __call__(
        self, what: str, *statements: Any, action: Any = None, quiet: bool = False
    ) -> bool:
        """Run ``statements`` (then ``action()``) as one step; True when it was done. A
        ``quiet`` step that fails is not reported (the caller tries another way)."""
        import psycopg

        self._warnings = []
        mark = len(self.done)
        try:
            with self.conn.transaction():
                for statement in statements:
                    self.conn.execute(statement)
                if action is not None:
                    action()
                if self._warnings:  # "no privileges were revoked", say: nothing happened
                    raise _Warned("; ".join(self._warnings))
        except _Warned as warned:
            self.done.append(f"not done: {what} ({warned})")
            return False
        except psycopg.errors.InsufficientPrivilege as err:
            self.done.append(f"not done, for lack of the right: {what} ({_reason(err)})")
            return False
        except psycopg.Error as err:
            self.done.append(f"not done: {what} ({_reason(err)})")
            return False
        finally:
            self._warnings = None
            if quiet:
                del self.done[mark:]
        self.done.append(what)
        return True

    def close(self) -> None:
        self.conn.remove_notice_handler(self._notice)


class _Warned(Exception):
    pass


def _reason(err: Any) -> str:
    primary = err.diag.message_primary or str(err).strip()
    detail = err.diag.message_detail
    return f"{primary}; {detail}" if detail else primary


def repair(conn: Any, *, force: bool = False) -> list[str]:
    """Make schema pgrag this release's, in the caller's transaction; returns what it did (and,
    as ``not done: ...``, what it tried and could not). Refuses a database whose functions say
    they are a newer release's, unless ``force``."""
    st = schema.state_of(conn)
    if not st.revision_current:
        raise SchemaNotReady(st.describe() + "; `pgrag db repair` works on the current revision")
    if st.functions_newer and not force:
        raise SchemaNotReady(
            st.describe() + "; `pgrag db repair --force` puts this release's functions back if"
            " no newer release ran here (pgrag.release() says so, and nothing verifies it)"
        )
    step = _Steps(conn)
    try:
        expected = fingerprint.expected()
        roles = fingerprint.existing_roles(conn)
        _functions(conn, step, expected, fingerprint.take(conn))
        live = fingerprint.take(conn)
        _unexpected(step, expected, live)
        _triggers(step, expected, live)
        _policies(step, expected, live)
        _relations(step, expected, live)
        _constraints(step, expected, live)
        _indexes(step, expected, live)
        _columns(step, expected, live)
        _sequences(conn, step, expected, fingerprint.take(conn))
        _privileges(step, expected, fingerprint.take(conn), roles)
        _partitions(conn, step)
        _model_indexes(conn, step)
        _owners(conn, step)
        _roles(conn, step)
        queued: list[int] = []
        what = "queued the chunks without a vector for pgrag worker"
        if step(what, action=lambda: queued.append(roundtrip.requeue(conn))):
            step.done.remove(what)
            if queued[0]:
                step.done.append(
                    f"queued {queued[0]} (chunk, model) pairs without a vector for pgrag worker"
                )
        return step.done
    finally:
        step.close()


def _q(query: str, **parts: Any) -> Any:
    """A named query with identifiers (or a definition the fingerprint holds) composed in."""
    from psycopg import sql

    return sql.SQL(query).format(**parts) if parts else sql.SQL(query)


def _ident(name: str) -> Any:
    """A relation named as the catalog writes it ('pgrag."Docs"', 'shadow'), as an identifier."""
    from psycopg import sql

    return sql.Identifier(*fingerprint.split_name(name))


def _split(name: str) -> tuple[Any, str]:
    """'pgrag.chunks.chunks_acl' -> (pgrag.chunks as an identifier, 'chunks_acl')."""
    from psycopg import sql

    parts = fingerprint.split_name(name)
    return sql.Identifier(*parts[:-1]), parts[-1]


def _functions(conn: Any, step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    """Every file of sql/functions/ re-applied, then pgrag.release() and the roles' grants.
    A file fails where a function was replaced by one CREATE OR REPLACE cannot replace (another
    return type, a procedure): then every function that differs from this release is dropped
    where nothing depends on it, and what failed is tried again (and reported if it fails)."""
    schema.use_vector(conn)
    attempts: list[tuple[str, Callable[[], None]]] = [
        (f"re-applied sql/functions/{name}.sql", partial(schema.apply_function_file, conn, name))
        for name in schema.FUNCTION_FILES
    ]
    attempts.append(
        (
            "recorded this release in pgrag.release() and granted pgrag's roles",
            partial(schema.record_release, conn),
        )
    )
    failed = [
        (what, action) for what, action in attempts if not step(what, action=action, quiet=True)
    ]
    if not failed:
        for what, _ in attempts:
            step.done.remove(what)
        step.done.append("re-applied every function of sql/functions/ and granted pgrag's roles")
        return
    from psycopg import sql

    for sig, digest in sorted(live["functions"].items()):
        if sig in expected["functions"] and digest != expected["functions"][sig]:
            step(f"dropped {sig} to create it again", _q(Q.drop_function, function=sql.SQL(sig)))
    for what, action in failed:
        step(what, action=action)


def _unexpected(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name in sorted(set(live["rules"]) - set(expected.get("rules", {}))):
        table, rule = _split(name)
        step(f"dropped rule {name}", _q(Q.drop_rule, rule=sql.Identifier(rule), table=table))
    for name in sorted(set(live["triggers"]) - set(expected["triggers"])):
        table, trigger = _split(name)
        step(
            f"dropped trigger {name}",
            _q(Q.drop_trigger, trigger=sql.Identifier(trigger), table=table),
        )
    for sig in sorted(set(live["functions"]) - set(expected["functions"])):
        # (regprocedure text: the server quoted each part of the name)
        step(f"dropped function {sig}", _q(Q.drop_function, function=sql.SQL(sig)))
    for operator in sorted(set(live["operators"]) - set(expected.get("operators", []))):
        step(f"dropped operator {operator}", _q(Q.drop_operator, operator=sql.SQL(operator)))
    for child, parent in sorted(live["children"].items()):
        if child not in expected.get("children", {}):
            step(
                f"detached {child} from {parent}",
                _q(Q.no_inherit, child=_ident(child), parent=_ident(parent)),
            )
    for entry in live.get("parents", []):
        child, parent = entry.split(" ", 1)
        step(
            f"detached {child} from {parent}",
            _q(Q.no_inherit, child=_ident(child), parent=_ident(parent)),
        )
    for name in live.get("statistics", []):
        step(f"dropped statistics {name}", _q(Q.drop_statistics, statistics=_ident(name)))
    for name, kind in sorted(live["types"].items()):
        if name not in expected.get("types", {}):
            query = Q.drop_domain if kind == "d" else Q.drop_type
            # (regtype text: the server quoted each part of the name)
            step(f"dropped type {name}", _q(query, type=sql.SQL(name)))
    for name, got in sorted(live["relations"].items()):
        if name not in expected["relations"] and got["kind"] in ("v", "m"):
            step(f"dropped view {name}", _q(Q.drop_view, relation=_ident(name)))


def _triggers(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    modes = {
        "O": Q.enable_trigger,
        "A": Q.enable_always_trigger,
        "R": Q.enable_replica_trigger,
        "D": Q.disable_trigger,
    }
    for name, want in sorted(expected["triggers"].items()):
        got = live["triggers"].get(name)
        table, trigger = _split(name)
        parts = {"trigger": sql.Identifier(trigger), "table": table}
        if got is None or got["definition"] != want["definition"]:
            statements = [_q(Q.drop_trigger, **parts), _q(want["definition"])]
            if want["enabled"] != "O":
                statements.append(_q(modes[want["enabled"]], **parts))
            step(f"re-created trigger {name}", *statements)
        elif got["enabled"] != want["enabled"]:
            step(f"enabled trigger {name}", _q(modes[want["enabled"]], **parts))
    for table in sorted(live["disabled_internal_triggers"]):
        step(
            f"enabled the foreign keys' triggers on {table}",
            _q(Q.enable_all_triggers, table=_ident(table)),
        )


def _policies(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name in sorted(set(live["policies"]) - set(expected["policies"])):
        table, policy = _split(name)
        step(
            f"dropped policy {name}",
            _q(Q.drop_policy, policy=sql.Identifier(policy), table=table),
        )
    for name, want in sorted(expected["policies"].items()):
        if live["policies"].get(name) == want:
            continue
        table, policy = _split(name)
        ident = sql.Identifier(policy)
        step(
            f"re-created policy {name}",
            _q(Q.drop_policy, policy=ident, table=table),
            _q(Q.create_policy, policy=ident, table=table, **_policy_parts(want)),
        )


def _relations(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name, want in sorted(expected["relations"].items()):
        got = live["relations"].get(name)
        if got is None:
            continue
        table = _ident(name)
        if got["rls"] != want["rls"]:
            state = "enabled" if want["rls"] else "disabled"
            step(
                f"{state} row-level security on {name}",
                _q(Q.enable_rls if want["rls"] else Q.disable_rls, table=table),
            )
        if got["force_rls"] != want["force_rls"]:
            step(
                f"set FORCE ROW LEVEL SECURITY on {name} as released",
                _q(Q.force_rls if want["force_rls"] else Q.no_force_rls, table=table),
            )
        if got.get("persistence") != want.get("persistence"):
            step(f"made {name} logged again", _q(Q.set_logged, table=table))
        if got.get("replica_identity", "d") != want.get("replica_identity", "d"):
            step(
                f"set the replica identity of {name} back to DEFAULT",
                _q(Q.replica_identity_default, table=table),
            )
        have, wanted = got.get("options", []), want.get("options", [])
        if have != wanted and want["kind"] in ("r", "p"):
            names = [o.split("=", 1)[0] for o in have if _OPTION.match(o.split("=", 1)[0])]
            statements = []
            if names:
                options = sql.SQL(", ").join(sql.SQL(n) for n in names)
                statements.append(_q(Q.reset_options, table=table, options=options))
            if wanted:  # (as the fingerprint holds them)
                options = sql.SQL(", ").join(sql.SQL(o) for o in wanted)
                statements.append(_q(Q.set_options, table=table, options=options))
            step(f"set the storage options of {name} back", *statements)


def _constraints(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    from psycopg import sql

    for name in sorted(set(live["constraints"]) - set(expected["constraints"])):
        table, constraint = _split(name)
        step(
            f"dropped constraint {name}",
            _q(Q.drop_constraint, table=table, constraint=sql.Identifier(constraint)),
        )
    for name, want in sorted(expected["constraints"].items()):
        got = live["constraints"].get(name)
        table, constraint = _split(name)
        ident = sql.Identifier(constraint)
        if got is None or got["definition"] != want["definition"]:
            step(
                f"re-created constraint {name}",
                _q(Q.drop_constraint, table=table, constraint=ident),
                _q(
                    Q.add_constraint,
                    table=table,
                    constraint=ident,
                    definition=sql.SQL(want["definition"]),
                ),
            )
        elif got["validated"] != want["validated"]:
            step(
                f"validated constraint {name}",
                _q(Q.validate_constraint, table=table, constraint=ident),
            )


def _indexes(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    for name in sorted(set(live["indexes"]) - set(expected["indexes"])):
        step(f"dropped index {name}", _q(Q.drop_index, index=_ident(name)))
    for name, want in sorted(expected["indexes"].items()):
        got = live["indexes"].get(name)
        if got == want:
            continue
        statements = [_q(want["definition"])]
        if got is not None:
            statements.insert(0, _q(Q.drop_index, index=_ident(name)))
        step(f"re-created index {name}", *statements)


def _columns(step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    """Defaults, NOT NULL and identity back as released (the other attributes would rewrite
    or lose data)."""
    from psycopg import sql

    for table in sorted(set(expected["columns"]) & set(live["columns"])):
        got = {c[0]: c for c in live["columns"][table]}
        for name, _type, notnull, default, identity, *_ in expected["columns"][table]:
            have = got.get(name)
            if have is None:
                continue
            parts = {"table": _ident(table), "column": sql.Identifier(name)}
            column = f"{table}.{name}"
            if have[4] != identity and identity in ("a", "d"):
                how = sql.SQL("ALWAYS" if identity == "a" else "BY DEFAULT")
                if have[4]:
                    step(
                        f"made {column} GENERATED {how.as_string()} again",
                        _q(Q.set_generated, how=how, **parts),
                    )
                else:  # (a default of its own, if any, goes: an identity has none)
                    statements = [_q(Q.add_identity, how=how, **parts)]
                    if have[3] is not None:
                        statements.insert(0, _q(Q.drop_default, **parts))
                    step(f"made {column} an identity column again", *statements)
            if have[3] != default and not identity:
                if default is None:
                    step(f"dropped the default of {column}", _q(Q.drop_default, **parts))
                else:
                    step(
                        f"set the default of {column} back",
                        _q(Q.set_default, default=sql.SQL(default), **parts),
                    )
            if have[2] != notnull:
                query = Q.set_not_null if notnull else Q.drop_not_null
                step(f"set NOT NULL on {column} as released", _q(query, **parts))


def _sequences(conn: Any, step: _Steps, expected: dict[str, Any], live: dict[str, Any]) -> None:
    """Sequences defined as released, and each one past the largest value of its column."""
    from psycopg import sql

    for name, want in sorted(expected.get("sequences", {}).items()):
        got = live.get("sequences", {}).get(name)
        if got is None or got == want:
            continue
        step(
            f"defined sequence {name} as released",
            _q(
                Q.alter_sequence,
                sequence=_ident(name),
                type=sql.SQL(want["type"]),
                increment=sql.Literal(want["increment"]),
                min=sql.Literal(want["min"]),
                max=sql.Literal(want["max"]),
                start=sql.Literal(want["start"]),
                cycle=sql.SQL("CYCLE" if want["cycle"] else "NO CYCLE"),
            ),
        )
    for released, actual in drift.renamed_sequences(conn, live):
        step(
            f"renamed sequence {actual} back to {released}",
            _q(
                Q.rename_sequence,
                sequence=_ident(actual),
                name=sql.Identifier(fingerprint.split_name(released)[-1]),
            ),
        )
    for table, column, sequence in drift.identity_columns(live):
        found = drift.behind(conn, table, column, sequence)
        if found:
            step(
                f"moved sequence {sequence} past {found[1]}, the largest {table}.{column}",
                action=lambda s=sequence, v=found[1]: conn.execute(
                    Q.move_sequence, {"sequence": s, "value": v}
                ),
            )


def _privileges(
    step: _Steps, expected: dict[str, Any], live: dict[str, Any], roles: set[str]
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
    for section in ("function_grants", "relation_grants", "column_grants"):
        exp, got = expected.get(section, {}), live[section]
        for name in sorted(n for n in set(exp) | set(got) if drift.exists(live, section, n)):
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
                    relation, column = _split(name)
                    what = "column"
                    parts["relation"], parts["column"] = relation, sql.Identifier(column)
                else:
                    what = "sequence" if kinds.get(name) == "S" else "relation"
                    parts["relation"] = _ident(name)
                way = "from" if revoke else "to"
                step(
                    f"{'revoked' if revoke else 'granted'} {privilege} on {name} {way} {who}",
                    _q(statements[verb, what], **parts),
                )
    for g in sorted(set(live["schema_grants"]) - drift.for_roles(expected["schema_grants"], roles)):
        who, privilege = g.split(" ", 1)
        step(
            f"revoked {privilege} on schema pgrag from {who}",
            _q(Q.revoke_schema, privilege=sql.SQL(privilege), grantee=grantee(who)),
        )
    for entry in sorted(
        set(live["default_privileges"]) - set(expected.get("default_privileges", []))
    ):
        role, objects, who, privilege = entry.split(" ", 3)
        step(
            f"revoked the default {privilege} on new {_OBJECTS[objects].lower()} from {who}",
            _q(
                Q.revoke_default,
                role=sql.Identifier(role),
                privilege=sql.SQL(privilege),
                objects=sql.SQL(_OBJECTS[objects]),
                grantee=grantee(who),
            ),
        )


def _model_indexes(conn: Any, step: _Steps) -> None:
    wrong = {d.name.split(" ", 1)[0] for d in drift._model_indexes(conn)}
    for (index,) in conn.execute(drift.Q.stray_model_indexes, {"without": None}).fetchall():
        step(
            f"dropped {index} (no model a collection uses)",
            _q(Q.drop_index, index=_ident(index)),
        )
        wrong.discard(index)
    for row in conn.execute(drift.Q.model_indexes).fetchall():
        model_id, name, index = row[:3]
        if index in wrong:
            building = conn.execute(Q.index_building, {"model_id": model_id}).fetchone()
            if building and building[0]:  # not dropped from under the build (it waits)
                step.done.append(
                    f"not done: build {index} (model {name}): another session is building"
                    " it; run `pgrag db repair` again if it is still invalid once that is done"
                )
                continue
            step(
                f"built {index} (model {name})",
                _q(Q.drop_index, index=_ident(index)),
                action=lambda m=model_id: conn.execute(Q.ensure_model_index, {"model_id": m}),
            )


def _partitions(conn: Any, step: _Steps) -> None:
    """A collection's missing partition created; those of deleted collections dropped."""
    for collection_id, name in conn.execute(drift.Q.partitions_missing).fetchall():
        step(
            f"created the partition of collection {name!r}",
            action=lambda c=collection_id: conn.execute(Q.create_partition, {"id": c}),
        )
    for (name,) in conn.execute(drift.Q.partitions_orphaned).fetchall():
        step(
            f"dropped pgrag.{name} (its collection was deleted)",
            _q(Q.drop_partition, table=_ident(f"pgrag.{name}")),
        )
    orphans, misfiled = conn.execute(drift.Q.stray_vectors).fetchone()
    if orphans:
        step(f"deleted {orphans} vectors whose chunk or model is gone", _q(Q.delete_orphan_vectors))
    if misfiled:
        step(
            f"moved {misfiled} vectors to their chunk's collection's partition",
            _q(Q.refile_vectors),
        )
    for name, grantees in conn.execute(drift.Q.partition_grants).fetchall():
        step(
            f"revoked the privileges of {', '.join(grantees)} on pgrag.{name}",
            _q(Q.revoke_partition, table=_ident(f"pgrag.{name}"), roles=_roles_list(grantees)),
        )


def _roles_list(grantees: list[str]) -> Any:
    """['alice', 'PUBLIC'] as the grantee list of a REVOKE."""
    from psycopg import sql

    return sql.SQL(", ").join(
        sql.SQL("PUBLIC") if g == "PUBLIC" else sql.Identifier(g) for g in grantees
    )


def _owners(conn: Any, step: _Steps) -> None:
    from psycopg import sql

    reference, others, most = drift.owner(conn)
    if most is not None:
        return  # which role is pgrag's owner is for a person to say (db check names both)
    for kind, name, who in others:
        target = sql.SQL(name) if kind == "function" else _ident(name)
        step(
            f"gave {kind} {name} back to {reference} (from {who})",
            _q(
                Q.set_owner,
                kind=sql.SQL(_KINDS[kind]),
                object=target,
                owner=sql.Identifier(reference),
            ),
        )


def _roles(conn: Any, step: _Steps) -> None:
    from psycopg import sql

    reference = drift.owner(conn)[0]
    for role, superuser, bypassrls, writer, owns in conn.execute(
        fingerprint.Q.role_attributes
    ).fetchall():
        ident = sql.Identifier(role)
        if superuser:
            step(
                f"made {role} NOSUPERUSER",
                _q(Q.alter_role, role=ident, attribute=sql.SQL("NOSUPERUSER")),
            )
        if bypassrls:
            step(
                f"made {role} NOBYPASSRLS",
                _q(Q.alter_role, role=ident, attribute=sql.SQL("NOBYPASSRLS")),
            )
        if role in drift.RESTRICTED and writer and not superuser:
            step(
                f"revoked pgrag_writer from {role}",
                _q(Q.revoke_role, granted=sql.Identifier("pgrag_writer"), role=ident),
            )
        if role in drift.RESTRICTED and owns and not superuser:
            step(
                f"revoked {reference} from {role}",
                _q(Q.revoke_role, granted=sql.Identifier(reference), role=ident),
            )


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
