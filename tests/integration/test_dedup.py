"""Identical documents stored once per collection, identical chunks embedded once (issue 5,
migration 0005): whatever later happens to the original or its copies, no content is lost and
no one reads through another document's access list."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

import pgrag
from pgrag.db import schema as migrate
from pgrag.db.connect import Database
from pgrag.ingest.removal import remove


def _doc(paragraphs: int = 3, tag: str = "") -> str:
    return "# Handbook\n\n" + "\n\n".join(
        f"## Topic {p}\n\nTopic {p} covers procedure {p * 11} for the {tag}team in detail. "
        f"Everyone follows step {p} before step {p + 1}."
        for p in range(paragraphs)
    )


def _state(dsn: str, collection: str) -> dict[str, tuple[int, str | None]]:
    """Per source: (chunks, the source it is a duplicate of)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT d.source, (SELECT count(*) FROM pgrag.chunks c WHERE c.document_id = d.id),"
            "       d.metadata ->> 'duplicate_of'"
            "  FROM pgrag.documents d JOIN pgrag.collections k ON k.id = d.collection_id"
            " WHERE k.name = %s",
            (collection,),
        ).fetchall()
    return {Path(s).name: (n, dup and Path(dup).name) for s, n, dup in rows}


@pytest.fixture
def twins(db: Database, tmp_path: Path) -> tuple[Database, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(_doc())
    (folder / "b.md").write_text(_doc())
    report = pgrag.ingest(db, [folder], collection="d")
    assert (report.count("added"), report.count("duplicate")) == (1, 1), report.summary()
    return db, folder


def test_an_identical_file_is_stored_once_and_its_location_recorded(
    twins: tuple[Database, Path],
) -> None:
    db, folder = twins
    state = _state(db.dsn, "d")
    assert state["a.md"][0] > 0 and state["b.md"] == (0, "a.md")
    hits = pgrag.search(db, "procedure 11", collection="d", k=10)
    assert {Path(h.source).name for h in hits} == {"a.md"}
    again = pgrag.ingest(db, [folder], collection="d")
    assert again.count("unchanged") == 2 and again.chunks_embedded == 0


def test_removing_the_original_hands_its_chunks_to_the_copy(
    twins: tuple[Database, Path],
) -> None:
    db, folder = twins
    chunks = _state(db.dsn, "d")["a.md"][0]
    (folder / "a.md").unlink()
    report = pgrag.ingest(db, [folder], collection="d", prune=True)
    assert report.count("deleted") == 1 and report.chunks_embedded == 0
    assert _state(db.dsn, "d") == {"b.md": (chunks, None)}
    hits = pgrag.search(db, "procedure 11", collection="d", k=3)
    assert Path(hits[0].source).name == "b.md"


def test_plain_sql_delete_and_pgrag_rm_hand_over_too(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "three"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(_doc())
    pgrag.ingest(db, [folder], collection="t")
    chunks = _state(db.dsn, "t")["a.md"][0]
    with psycopg.connect(db.dsn) as conn:
        conn.execute("DELETE FROM pgrag.documents WHERE source = %s", (str(folder / "a.md"),))
    # b inherits; c now points at b.
    assert _state(db.dsn, "t") == {"b.md": (chunks, None), "c.md": (0, "b.md")}
    remove(db, [folder / "b.md"], collection="t")
    assert _state(db.dsn, "t") == {"c.md": (chunks, None)}
    # An original and its first copy deleted by one statement: the last copy inherits.
    for name in ("a.md", "b.md", "d.md"):
        (folder / name).write_text(_doc(tag="again "))
    pgrag.ingest(db, [folder], collection="t2")
    assert _state(db.dsn, "t2")["b.md"] == (0, "a.md")
    with psycopg.connect(db.dsn) as conn:
        conn.execute(
            "DELETE FROM pgrag.documents WHERE source = ANY (%s)",
            ([str(folder / "a.md"), str(folder / "b.md")],),
        )
    state = _state(db.dsn, "t2")
    assert set(state) == {"c.md", "d.md"} and state["d.md"][0] > 0 and state["d.md"][1] is None


def test_changing_the_original_leaves_the_copy_its_old_content(
    twins: tuple[Database, Path],
) -> None:
    db, folder = twins
    old_chunks = _state(db.dsn, "d")["a.md"][0]
    (folder / "a.md").write_text(_doc(tag="new "))
    report = pgrag.ingest(db, [folder], collection="d")
    assert report.count("updated") == 1
    state = _state(db.dsn, "d")
    assert state["b.md"] == (old_chunks, None) and state["a.md"][0] > 0
    texts = {
        Path(h.source).name: h.text
        for h in pgrag.search(db, "procedure 11 team", collection="d", k=10, mode="keyword")
    }
    assert "new team" in texts["a.md"] and "new team" not in texts["b.md"]


def test_a_copy_with_other_readers_is_stored_separately(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "acl"
    folder.mkdir()
    (folder / "a.md").write_text(_doc())
    pgrag.ingest(db, [folder / "a.md"], collection="acl")
    shutil.copy(folder / "a.md", folder / "secret.md")
    report = pgrag.ingest(db, [folder / "secret.md"], collection="acl", allow=["alice"])
    assert report.count("added") == 1 and report.chunks_embedded == 0  # vectors reused
    assert _state(db.dsn, "acl")["secret.md"][1] is None


def test_an_access_change_gives_a_copy_its_own_chunks(
    twins: tuple[Database, Path],
) -> None:
    db, folder = twins
    chunks = _state(db.dsn, "d")["a.md"][0]
    report = pgrag.ingest(db, [folder / "b.md"], collection="d", allow=["bob"])
    assert report.count("access") == 1 and report.chunks_embedded == 0
    assert _state(db.dsn, "d") == {"a.md": (chunks, None), "b.md": (chunks, None)}
    as_bob = pgrag.search(db, "procedure 11", collection="d", k=10, principals=["bob"])
    assert {Path(h.source).name for h in as_bob} == {"a.md", "b.md"}
    as_carol = pgrag.search(db, "procedure 11", collection="d", k=10, principals=["carol"])
    assert {Path(h.source).name for h in as_carol} == {"a.md"}
    # And the other way: the original's readers change, the copy keeps its own.
    (folder / "c.md").write_text(_doc(tag="c "))
    (folder / "d.md").write_text(_doc(tag="c "))
    pgrag.ingest(db, [folder], collection="d")
    assert _state(db.dsn, "d")["d.md"] == (0, "c.md")
    pgrag.ingest(db, [folder / "c.md"], collection="d", allow=["erin"])
    as_frank = pgrag.search(db, "c team", collection="d", k=20, principals=["frank"])
    assert "d.md" in {Path(h.source).name for h in as_frank}
    assert "c.md" not in {Path(h.source).name for h in as_frank}


def test_a_renamed_and_edited_file_embeds_only_what_changed(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "mv"
    folder.mkdir()
    (folder / "old.md").write_text(_doc(paragraphs=5))
    first = pgrag.ingest(db, [folder], collection="mv")
    text = (folder / "old.md").read_text().replace("procedure 22", "procedure 222")
    (folder / "old.md").unlink()
    (folder / "new.md").write_text(text)
    report = pgrag.ingest(db, [folder], collection="mv", prune=True)
    assert report.count("added") == 1 and report.count("deleted") == 1
    assert report.chunks_embedded == 1 < first.chunks_embedded


def test_downgrading_0005_gives_every_copy_its_chunks(twins: tuple[Database, Path]) -> None:
    db, _ = twins
    chunks = _state(db.dsn, "d")["a.md"][0]
    db.close()
    migrate.downgrade(db.dsn, "0004", confirm=True)  # (through 0007, 0006 and 0005)
    assert _state(db.dsn, "d") == {"a.md": (chunks, None), "b.md": (chunks, None)}
    migrate.upgrade(db.dsn)


def test_a_new_copy_of_content_its_original_loses_in_the_same_run_keeps_it(
    db: Database, tmp_path: Path
) -> None:
    # Review finding: b.md, new, equal to a.md's stored text, while a.md changes in the same run.
    folder = tmp_path / "swap"
    folder.mkdir()
    (folder / "a.md").write_text(_doc(tag="zebra "))
    pgrag.ingest(db, [folder], collection="swap")
    (folder / "b.md").write_text(_doc(tag="zebra "))
    (folder / "a.md").write_text(_doc(tag="giraffe "))
    report = pgrag.ingest(db, [folder], collection="swap")
    assert (report.count("added"), report.count("updated")) == (1, 1), report.summary()
    state = _state(db.dsn, "swap")
    assert state["b.md"][0] > 0 and state["b.md"][1] is None
    hits = pgrag.search(db, "zebra team", collection="swap", k=3, mode="keyword")
    assert Path(hits[0].source).name == "b.md" and "zebra" in hits[0].text


def test_large_identical_files_are_never_copies_of_one_written_later(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review finding: a copy of a streamed file was committed before it, and stayed empty if
    # the file then failed. Streamed files are written last, so they are never originals for
    # copies planned in the same run.
    from pgrag.ingest import loaders

    monkeypatch.setattr(loaders, "MAX_BYTES", 200)
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "a.md").write_text(_doc())
    (folder / "b.md").write_text(_doc())
    report = pgrag.ingest(db, [folder], collection="big")
    assert report.count("added") == 2 and not report.count("duplicate")
    state = _state(db.dsn, "big")
    assert state["a.md"][0] == state["b.md"][0] > 0
    assert report.chunks_embedded == state["a.md"][0]  # the second reused the first's vectors


def test_a_copy_whose_original_changes_before_it_is_written_fails_cleanly(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review finding: between planning and writing, another process may rewrite the original.
    # The copy must not then point at content that is no longer its own.
    import importlib

    ingest_module = importlib.import_module("pgrag.ingest.pipeline")

    folder = tmp_path / "race"
    folder.mkdir()
    (folder / "a.md").write_text(_doc())
    pgrag.ingest(db, [folder], collection="race")
    (folder / "b.md").write_text(_doc())
    real_embed = ingest_module.embed_batch

    def embed_while_another_writer_acts(*args: object, **kwargs: object) -> object:
        with psycopg.connect(db.dsn) as other:  # another process rewrites a.md meanwhile
            other.execute(
                "UPDATE pgrag.documents SET content_hash = 'rewritten' WHERE source = %s",
                (str(folder / "a.md"),),
            )
        return real_embed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_module, "embed_batch", embed_while_another_writer_acts)
    errors: list[str] = []
    report = pgrag.ingest(
        db, [folder], collection="race", on_error=lambda path, reason: errors.append(reason)
    )
    assert [f.status for f in report.files if Path(f.path).name == "b.md"] == ["failed"]
    assert errors and "changed during this ingest; run the ingest again" in errors[0]
    assert "b.md" not in _state(db.dsn, "race")
    monkeypatch.undo()
    # Run again: a.md is rewritten in that run too, so b.md is stored as a document of its own
    # (see the test above), with the vectors it shares with a.md reused.
    rerun = pgrag.ingest(db, [folder], collection="race")
    assert (rerun.count("updated"), rerun.count("added"), rerun.chunks_embedded) == (1, 1, 0)
    state = _state(db.dsn, "race")
    assert state["b.md"][0] == state["a.md"][0] > 0


def test_copies_follow_an_original_renamed_with_plain_sql(twins: tuple[Database, Path]) -> None:
    db, folder = twins
    chunks = _state(db.dsn, "d")["a.md"][0]
    renamed = str(folder / "renamed.md")
    with psycopg.connect(db.dsn) as conn:
        conn.execute(
            "UPDATE pgrag.documents SET source = %s WHERE source = %s",
            (renamed, str(folder / "a.md")),
        )
    assert _state(db.dsn, "d") == {"renamed.md": (chunks, None), "b.md": (0, "renamed.md")}
    with psycopg.connect(db.dsn) as conn:
        conn.execute("DELETE FROM pgrag.documents WHERE source = %s", (renamed,))
    assert _state(db.dsn, "d") == {"b.md": (chunks, None)}  # the copy inherited
