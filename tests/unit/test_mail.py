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


# Found by ingesting CPython's own test messages (Debian's libpython3.11-testsuite,
# test_email/data): mail as other programs write it.


def test_a_message_file_without_from_or_a_blank_line_after_its_headers_is_read(
    tmp_path: Path,
) -> None:
    no_from = b"MIME-Version: 1.0\nContent-Type: text/plain\nSubject: Draft\n\nThe draft text.\n"
    run_on = b"From: a@example.com\nTo: b@example.com\nSubject: Run on\nno blank line here\n"
    for name, raw, text in (
        ("draft.eml", no_from, "The draft text."),
        ("run-on.eml", run_on, "Subject: Run on"),
    ):
        path = tmp_path / name
        path.write_bytes(raw)
        [(_, doc)] = _items(path)
        assert isinstance(doc, LoadedFile) and text in doc.text, (name, doc)
    # a file of no known kind still needs From: and a header block that ends
    assert sniff(no_from, "") != "email" and sniff(run_on, "") != "email"
    with pytest.raises(InputError, match="does not start with mail headers"):
        sniff(b"Send submissions to\n\tppp@example.org\n", ".eml")


def test_attachments_pgrag_does_not_read_are_skipped_and_empty_ones_ignored(
    tmp_path: Path,
) -> None:
    from pgrag.errors import SkippedInput

    message = mail_message("Photos", "Two pictures and the rota.", msgid="<photos@example.com>")
    gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"  # (a picture pgrag does not read)
    message.add_attachment(gif, maintype="image", subtype="gif", filename="team.gif")
    message.add_attachment(b"\x00\x01\x02", maintype="application", subtype="octet-stream")
    message.add_attachment(b"", maintype="text", subtype="plain", filename="empty.txt")
    message.add_attachment(b"day,who\nMon,Ana\n", maintype="text", subtype="csv", filename="r.csv")
    path = tmp_path / "photos.eml"
    path.write_bytes(bytes(message))
    items = dict(_items(path))
    base = f"{path}#photos@example.com"
    assert list(items) == [base, f"{base}/team.gif", f"{base}/attachment-2", f"{base}/r.csv"]
    for skipped, kind in ((f"{base}/team.gif", "image/gif"), (f"{base}/attachment-2", "octet")):
        item = items[skipped]
        assert isinstance(item, SkippedInput) and "does not read" in str(item) and kind in str(item)
    assert isinstance(items[f"{base}/r.csv"], LoadedFile)


def test_a_text_attachment_is_read_in_the_charset_it_declares(tmp_path: Path) -> None:
    message = mail_message("Menu", "The menu is attached.", msgid="<menu@example.com>")
    latin = "Crème brûlée, 4 €".encode("cp1252")
    message.add_attachment(latin, maintype="text", subtype="plain", filename="menu.txt")
    message.get_payload()[1].set_param("charset", "windows-1252")
    path = tmp_path / "menu.eml"
    path.write_bytes(bytes(message))
    items = dict(_items(path))
    menu = items[f"{path}#menu@example.com/menu.txt"]
    assert isinstance(menu, LoadedFile) and "Crème brûlée, 4 €" in menu.text


def test_a_mailbox_whose_first_message_has_no_headers_is_still_a_mailbox(tmp_path: Path) -> None:
    # A hostile review: a .mbox whose first message had no header lines was read as one text
    # document, and with a NUL byte in that message refused whole.
    message = mail_message("Parking", "The car park closes in May.", msgid="<p@example.com>")
    path = tmp_path / "box.mbox"
    path.write_bytes(
        b"From nobody Mon Jan  1 00:00:00 2024\nno headers here \x00 at all\n\n"
        b"From someone Mon Jan  1 00:00:00 2024\n" + bytes(message) + b"\n"
    )
    assert sniff(path.read_bytes()[:4096], ".mbox") == "email"
    items = dict(_items(path))
    parking = items[f"{path}#p@example.com"]
    assert isinstance(parking, LoadedFile) and "car park closes in May" in parking.text
    assert len(items) == 2  # the headless one: a document or its own error, not the box's


def test_a_body_in_a_charset_python_does_not_know_is_read_as_its_bytes(tmp_path: Path) -> None:
    message = mail_message("Menu", "placeholder", msgid="<m@example.com>")
    raw = bytes(message).replace(b"placeholder", b"Soup of the day: leek, caf\xe9 na\xefve")
    raw = raw.replace(b'charset="utf-8"', b"charset=x-nonsense-42")
    path = tmp_path / "menu.eml"
    path.write_bytes(raw)
    assert b"x-nonsense-42" in raw
    [(_, item)] = _items(path)
    assert isinstance(item, LoadedFile) and "Soup of the day: leek, café naïve" in item.text
    assert item.notes == (
        "its body's charset 'x-nonsense-42' is unknown; read as UTF-8 or Windows-1252",
    )
