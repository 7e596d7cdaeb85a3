"""Who may read what: principals for a session, and access lists on documents.

The database enforces access (migration 0003, sql/functions/access_v1.sql: SECURITY DEFINER
search and listing functions for restricted roles, row-level security on the tables); this
module only tells it who is asking and changes what is stored. A principal is a name such as
``alice``, ``group:billing`` or ``alice@example.com``; ``public`` means everyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db.principals import check_principals
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database


@dataclass(frozen=True)
class DocumentAccess:
    collection: str
    source: str
    principals: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "source": self.source, "principals": self.principals}


def _selection(
    collection: str, sources: Sequence[str] | None, prefix: str | None, all_documents: bool
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause choosing documents (fixed text; values are parameters)."""
    chosen = sum([bool(sources), prefix is not None, all_documents])
    if chosen != 1:
        raise InputError(
            "choose the documents with exactly one of: sources, a prefix, or all documents"
            " (--source, --prefix or --all)"
        )
    where = "d.collection_id = (SELECT id FROM pgrag.collections WHERE name = %(collection)s)"
    params: dict[str, Any] = {"collection": collection}
    if sources:
        where += " AND d.source = ANY(%(sources)s)"
        params["sources"] = list(sources)
    elif prefix is not None:
        # starts_with, not LIKE: a % or _ in the prefix is a character, not a wildcard.
        where += " AND starts_with(d.source, %(prefix)s)"
        params["prefix"] = prefix
    return where, params


def _require_collection(conn: Any, collection: str) -> None:
    if (
        conn.execute(
            "SELECT 1 FROM pgrag.collections WHERE name = %(c)s", {"c": collection}
        ).fetchone()
        is None
    ):
        raise InputError(
            f"collection {collection!r} does not exist (`pgrag collections` lists them)"
        )


def change(
    db: Database,
    *,
    grant: Sequence[str] = (),
    revoke: Sequence[str] = (),
    collection: str = "default",
    sources: Sequence[str] | None = None,
    prefix: str | None = None,
    all_documents: bool = False,
) -> list[DocumentAccess]:
    """Add ``grant`` to and remove ``revoke`` from the principals of the chosen documents, in
    one transaction. Their chunks, vectors and keyword postings follow (a trigger); nothing is
    re-embedded. Returns the documents changed, with their new principals. A source that names
    no document is an error, and then nothing changes."""
    from pgrag.db.connect import transaction

    add = check_principals(grant)
    remove = check_principals(revoke)
    if not add and not remove:
        raise InputError("name at least one principal to grant or revoke")
    where, params = _selection(collection, sources, prefix, all_documents)
    with transaction(db) as conn:
        _require_collection(conn, collection)
        if sources:
            found = {
                r[0]
                for r in conn.execute(
                    f"SELECT d.source FROM pgrag.documents d WHERE {where}",  # noqa: S608
                    params,
                ).fetchall()
            }
            missing = [s for s in sources if s not in found]
            if missing:
                raise InputError(
                    f"no document {missing[0]!r} in collection {collection!r}"
                    " (`pgrag acl show` lists them); nothing was changed"
                )
        rows = conn.execute(
            "UPDATE pgrag.documents d SET principals = ARRAY("  # noqa: S608
            "   SELECT p FROM unnest(d.principals || %(add)s::text[]) p"
            "   EXCEPT SELECT unnest(%(remove)s::text[])),"
            " updated_at = now()"
            f" WHERE {where} RETURNING d.source, d.principals",
            {**params, "add": add, "remove": remove},
        ).fetchall()
    return [DocumentAccess(collection, r[0], list(r[1])) for r in sorted(rows)]


def show(
    db: Database,
    *,
    collection: str = "default",
    sources: Sequence[str] | None = None,
    prefix: str | None = None,
) -> list[DocumentAccess]:
    """The documents (all, or those chosen) and who may read them."""
    from pgrag.db.connect import transaction

    where, params = _selection(collection, sources, prefix, not sources and prefix is None)
    with transaction(db) as conn:
        _require_collection(conn, collection)
        rows = conn.execute(
            f"SELECT d.source, d.principals FROM pgrag.documents d WHERE {where}"  # noqa: S608
            " ORDER BY d.source",
            params,
        ).fetchall()
    return [DocumentAccess(collection, r[0], list(r[1])) for r in rows]


def map_role(db: Database, role: str, principals: Sequence[str], *, remove: bool = False) -> None:
    """Map a database role (and every role that is a member of it) to principals, for
    applications whose users connect as their own roles; ``remove`` deletes the mappings."""
    from pgrag.db.connect import transaction

    names = check_principals(principals)
    with transaction(db) as conn:
        if remove:
            conn.execute(
                "DELETE FROM pgrag.role_principals WHERE role_name = %(r)s"
                " AND principal = ANY(%(p)s)",
                {"r": role, "p": names},
            )
            return
        if (
            conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %(r)s", {"r": role}).fetchone()
            is None
        ):
            raise InputError(f"database role {role!r} does not exist; create it first")
        conn.execute(
            "INSERT INTO pgrag.role_principals (role_name, principal)"
            " SELECT %(r)s, unnest(%(p)s::text[]) ON CONFLICT DO NOTHING",
            {"r": role, "p": names},
        )
