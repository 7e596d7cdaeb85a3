"""Large Markdown and text files are streamed (issue 5): read a line at a time, chunked section
by section, embedded and written in groups inside one transaction. The tests lower the size
above which a file is streamed, so that the real model can embed every chunk quickly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgrag
from pgrag.db.connect import Database
from pgrag.ingest import loaders
from pgrag.text import chunking


def _big_markdown(path: Path, sections: int = 12) -> Path:
    parts = ["---\ntitle: front matter is dropped\n---", "# Operations manual"]
    for s in range(sections):
        parts.append(f"## Chapter {s}")
        for p in range(4):
            parts.append(
                f"Chapter {s} paragraph {p} explains valve {s * 10 + p}. Operators check gauge "
                f"{p} every {s + 1} hours and record the reading in log book {s}-{p}."
            )
        parts.append("```\n# a comment in code, not a heading\nrun --step " + str(s) + "\n```")
    path.write_text("\n\n".join(parts) + "\n")
    return path


def _chunks(dsn: str, collection: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT c.ordinal, c.section, c.content, c.token_count FROM pgrag.chunks c"
            " JOIN pgrag.collections k ON k.id = c.collection_id AND k.name = %s"
            " ORDER BY c.ordinal",
            (collection,),
        ).fetchall()


@pytest.fixture
def streaming(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files over 2,000 bytes are streamed, and never read whole."""
    monkeypatch.setattr(loaders, "MAX_BYTES", 2000)
    real = Path.read_bytes

    def whole(self: Path) -> bytes:
        if self.stat().st_size > 2000:
            raise AssertionError(f"{self} was read whole")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", whole)


def test_a_streamed_file_gives_the_chunks_a_whole_read_gives(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_markdown(tmp_path / "manual.md")
    assert path.stat().st_size > 2000
    whole = pgrag.ingest(db, [path], collection="whole")
    assert not whole.failed
    with monkeypatch.context() as m:
        m.setattr(loaders, "MAX_BYTES", 2000)
        streamed = pgrag.ingest(db, [path], collection="streamed", batch_chunks=5)
    assert not streamed.failed, streamed.failed
    assert streamed.chunks_written == whole.chunks_written > 10
    assert _chunks(db.dsn, "streamed") == _chunks(db.dsn, "whole")
    sections = {r[1] for r in _chunks(db.dsn, "streamed")}
    assert "Operations manual > Chapter 3" in sections
    assert not any("front matter" in r[2] for r in _chunks(db.dsn, "streamed"))
    with psycopg.connect(db.dsn) as conn:
        meta = conn.execute(
            "SELECT metadata FROM pgrag.documents d JOIN pgrag.collections k"
            " ON k.id = d.collection_id WHERE k.name = 'streamed'"
        ).fetchone()[0]
    assert meta["streamed"] is True and meta["format"] == "markdown"
    hits = pgrag.search(db, "valve 32 gauge", collection="streamed", k=1)
    assert "valve 32" in hits[0].text


def test_a_changed_streamed_file_embeds_only_changed_chunks(
    db: Database, tmp_path: Path, streaming: None
) -> None:
    path = _big_markdown(tmp_path / "manual.md")
    first = pgrag.ingest(db, [path], collection="s", batch_chunks=4)
    assert first.chunks_embedded == first.chunks_written
    path.write_text(path.read_text().replace("valve 52.", "valve 52, the red one."))
    second = pgrag.ingest(db, [path], collection="s", batch_chunks=4)
    assert second.count("updated") == 1
    assert second.chunks_written == first.chunks_written
    assert 1 <= second.chunks_embedded <= 2, second.summary()  # the chunk(s) holding it
    assert any("the red one" in r[2] for r in _chunks(db.dsn, "s"))


def test_a_long_section_is_chunked_in_parts_within_the_limit(
    db: Database, tmp_path: Path, streaming: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunking, "STREAM_SECTION_CHARS", 500)
    path = tmp_path / "log.txt"
    lines = [f"Entry {i}: the pump at station {i % 7} ran for {i} minutes." for i in range(300)]
    path.write_text("\n\n".join(lines) + "\n")
    report = pgrag.ingest(db, [path], collection="log", batch_chunks=8)
    assert not report.failed and report.chunks_written > 10
    rows = _chunks(db.dsn, "log")
    text = " ".join(r[2] for r in rows)
    assert all(f"Entry {i}:" in text for i in range(300))  # nothing lost between parts
    assert max(r[3] for r in rows) <= 200


def test_a_bad_byte_late_in_a_streamed_file_writes_nothing(
    db: Database, tmp_path: Path, streaming: None
) -> None:
    path = _big_markdown(tmp_path / "manual.md")
    path.write_bytes(path.read_text().encode() + b"\n\xff\xfe bad\n")
    good = _big_markdown(tmp_path / "other.md", sections=2)
    report = pgrag.ingest(db, [path, good], collection="bad")
    assert [f.status for f in report.files] == ["failed", "added"]
    assert "is not valid UTF-8" in (report.files[0].reason or "")
    with psycopg.connect(db.dsn) as conn:
        sources = [r[0] for r in conn.execute("SELECT source FROM pgrag.documents").fetchall()]
    assert sources == [str(good.resolve())]
