"""Who may read what: principals for a session, and access lists on documents.

The database enforces access (sql/functions/access.sql and sql/schema/policies.sql: SECURITY
DEFINER search and listing functions for restricted roles, row-level security on the tables); this
module only tells it who is asking and changes what is stored. A principal is a name such as
``alice``, ``group:billing`` or ``alice@example.com``; ``public`` means everyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.collections import require_collection_id
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.db.principals import check_principals
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


@dataclass(frozen=True)
class DocumentAccess:
    collection: str
    source: str
    principals: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "source": self.source, "principals": self.principals}


def _selection(
    collection: str, sources: Sequence[str] | None, prefix: str | None, all_documents: bool
) -> dict[str, Any]:
    """The parameters choosing documents in the chosen_* queries (None: not by that)."""
    chosen = sum([bool(sources), prefix is not None, all_documents])
    if chosen != 1:
        raise InputError(
            "choose the documents with exactly one of: sources, a prefix, or all documents"
            " (--source, --prefix or --all)"
        )
    return {
        "collection": collection,
        "sources": list(sources) if sources else None,
        "prefix": prefix,
    }


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
    add = check_principals(grant)
    remove = check_principals(revoke)
    if not add and not remove:
        raise InputError("name at least one principal to grant or revoke")
    params = _selection(collection, sources, prefix, all_documents)
    with transaction(db) as conn:
        require_collection_id(conn, collection)
        if sources:
            found = {r[0] for r in conn.execute(Q.chosen_sources, params).fetchall()}
            missing = [s for s in sources if s not in found]
            if missing:
                raise InputError(
                    f"no document {missing[0]!r} in collection {collection!r}"
                    " (`pgrag acl show` lists them); nothing was changed"
                )
        rows = conn.execute(
            Q.change_principals, {**params, "add": add, "remove": remove}
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
    params = _selection(collection, sources, prefix, not sources and prefix is None)
    with transaction(db) as conn:
        require_collection_id(conn, collection)
        rows = conn.execute(Q.chosen_principals, params).fetchall()
    return [DocumentAccess(collection, r[0], list(r[1])) for r in rows]


def map_role(db: Database, role: str, principals: Sequence[str], *, remove: bool = False) -> None:
    """Map a database role (and every role that is a member of it) to principals, for
    applications whose users connect as their own roles; ``remove`` deletes the mappings."""
    names = check_principals(principals)
    with transaction(db) as conn:
        if remove:
            conn.execute(Q.unmap_role, {"role": role, "principals": names})
            return
        if conn.execute(Q.role_exists, {"role": role}).fetchone() is None:
            raise InputError(f"database role {role!r} does not exist; create it first")
        conn.execute(Q.map_role, {"role": role, "principals": names})
