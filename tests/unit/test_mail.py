"""Mail (pgrag.ingest.formats.mail): messages and mailboxes written by Python's own email
and mailbox packages; each message a document, each readable attachment one of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag.errors import InputError
from pgrag.ingest.formats import sniff
from pgrag.ingest.loaders import LoadedFile, load_path
from tests.samples import mail_message, write_eml, write_mbox


def _items(path: Path) -> list[tuple[str, LoadedFile | InputError]]:
    return list(load_path(path))


def test_a_message_and_its_attachments_are_documents(tmp_path: Path) -> None:
    path = write_eml(tmp_path / "prices.eml", tmp_path)
    items = dict(_items(path))
    base = f"{path}#prices-2027@example.com"
    assert list(items) == [
        base,
        f"{base}/prices.csv",
        f"{base}/handbook.docx",
        f"{base}/attachment-3.eml#hours@example.com",
        f"{base}/scan.pdf",
    ]  # (the inline image is skipped)
    message = items[base]
    assert isinstance(message, LoadedFile)
    assert (message.format, message.title, message.source) == (
        "email",
        "Supplier prices for 2027",
        f"{path.resolve()}#prices-2027@example.com",
    )
    assert message.metadata["from"] == "Ana Silva <ana@example.com>"
    assert message.metadata["date"] == "2026-12-03T09:15:00+00:00"
    assert message.text.startswith("From: Ana Silva <ana@example.com>\nTo: Team <team@example.com>")
    assert "The Lisbon depot closes on Fridays." in message.text  # the plain part, not the HTML
    csv = items[f"{base}/prices.csv"]
    assert isinstance(csv, LoadedFile) and csv.format == "csv"
    assert csv.text.startswith("| sku | price |\n| --- | --- |\n| WX-001 | 13 EUR |")
    assert csv.metadata["attachment_of"] == message.source
    assert csv.source == f"{message.source}/prices.csv"
    assert csv.metadata["record"] == "prices-2027@example.com/prices.csv"
    docx = items[f"{base}/handbook.docx"]
    assert isinstance(docx, LoadedFile) and docx.format == "docx" and "| WX-042 |" in docx.text
    inner = items[f"{base}/attachment-3.eml#hours@example.com"]
    assert isinstance(inner, LoadedFile) and "The Porto depot opens at 7:30." in inner.text
    assert inner.source == f"{message.source}/attachment-3.eml#hours@example.com"
    broken = items[f"{base}/scan.pdf"]
    assert isinstance(broken, InputError) and "cannot be read as a PDF" in str(broken)


def test_a_mailbox_is_a_document_per_message(tmp_path: Path) -> None:
    items = _items(write_mbox(tmp_path / "team.mbox"))
    keys = [label.split("#", 1)[1] for label, _ in items]
    assert keys == ["rota@example.com", "parking@example.com", "parking@example.com-2"]
    assert all(isinstance(item, LoadedFile) and item.title for _, item in items)
    texts = [item.text for _, item in items if isinstance(item, LoadedFile)]
    assert "Correction: the car park closes the week after." in texts[2]


def test_an_html_only_message_is_read_as_a_page(tmp_path: Path) -> None:
    message = mail_message("Newsletter", "x", msgid="<news@example.com>")
    message.set_content(
        "<html><body><h1>News</h1><p>The canteen reopens in May.</p></body></html>", subtype="html"
    )
    path = tmp_path / "news.eml"
    path.write_bytes(bytes(message))
    [(_, doc)] = _items(path)
    assert isinstance(doc, LoadedFile) and doc.markdown
    assert "# News" in doc.text and "The canteen reopens in May." in doc.text
    assert "<p>" not in doc.text


def test_content_decides(tmp_path: Path) -> None:
    raw = bytes(mail_message("Hello", "Body.", msgid="<a@b>"))
    assert sniff(raw, ".eml") == "email"
    assert sniff(raw, "") == "email"  # no suffix: its headers say so
    assert sniff(b"From nobody Thu Dec  3 09:15:00 2026\n" + raw, ".mbox") == "email"
    # prose that starts like a header is not mail
    assert sniff(b"Note: bring a coat.\nSubject: weather\n\nIt rains.\n", ".txt") == "text"
    assert sniff(b"From: me\nNote: not enough mail headers\n\nHi.\n", "") != "email"
    with pytest.raises(InputError, match=r"is named \.eml but does not start with mail headers"):
        sniff(b"Just some text.\n", ".eml")


def test_attachments_over_the_limit_and_too_deep_fail_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.ingest.formats import mail

    monkeypatch.setattr(mail, "MAX_ATTACHMENT_BYTES", 2000)
    monkeypatch.setattr(mail, "MAX_DEPTH", 1)
    message = mail_message("Big", "See attached.", msgid="<big@example.com>")
    message.add_attachment(b"x, y\n" * 500, maintype="text", subtype="csv", filename="big.csv")
    inner = mail_message("Inner", "Inner text.", msgid="<inner@example.com>")
    inner.add_attachment(mail_message("Deepest", "Deep.", msgid="<deep@example.com>"))
    message.add_attachment(inner)
    path = tmp_path / "big.eml"
    path.write_bytes(bytes(message))
    items = dict(_items(path))
    assert isinstance(items[f"{path}#big@example.com"], LoadedFile)
    big = items[f"{path}#big@example.com/big.csv"]
    assert isinstance(big, InputError) and "over the 2000-byte limit for an attachment" in str(big)
    inner_doc = items[f"{path}#big@example.com/attachment-2.eml#inner@example.com"]
    assert isinstance(inner_doc, LoadedFile)
    deep = items[f"{path}#big@example.com/attachment-2.eml#inner@example.com/attachment-1.eml"]
    assert isinstance(deep, InputError) and "attached 1 deep" in str(deep)


def test_attachment_names_the_file_system_would_refuse_or_repeat(tmp_path: Path) -> None:
    """Found by review: a NUL in a name crashed the whole ingest; a name over 255 bytes or
    '..' dropped the rest of a mailbox; two attachments of one name lost the second."""
    message = mail_message("Names", "See attached.", msgid="<names@example.com>")
    for name in ("a\x00b.csv", "報告書" * 40 + ".csv", "..", "notes.csv", "notes.csv"):
        message.add_attachment(b"k,v\nx,1\n", maintype="text", subtype="csv", filename=name)
    second = mail_message("After", "The second message.", msgid="<after@example.com>")
    box = tmp_path / "names.mbox"
    import mailbox

    mb = mailbox.mbox(box)
    mb.add(message)
    mb.add(second)
    mb.flush()
    mb.close()
    items = _items(box)
    labels = [label.split("#", 1)[1] for label, _ in items]
    assert all(isinstance(item, LoadedFile) for _, item in items), items
    assert labels[0] == "names@example.com" and labels[-1] == "after@example.com"
    names = [label.split("/", 1)[1] for label in labels[1:-1]]
    assert names[0] == "ab.csv"  # (the NUL dropped)
    assert len(names[1].encode()) <= 120 and names[1].endswith(".csv")
    assert names[2:] == ["attachment-3", "notes.csv", "notes-2.csv"]
