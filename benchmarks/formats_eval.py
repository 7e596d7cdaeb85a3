"""Questions whose answer sits in a table cell, a sheet, a slide, a chapter or an attachment:
answer-in-top-k per format for hybrid search (issue 20).

Documents are generated from known content in each format pgrag reads, with the libraries that
write them (python-docx, openpyxl, python-pptx, zipfile (EPUB), reportlab, Python's email and
mailbox): a catalogue of products, each a row (or a slide, a sentence, a message) with a
name ("amber kettle K-482"), a price, a warehouse city and a lead time. Every format holds its
own products, several files each, all in one collection, so that each format's documents are
the others' distractors. For a seeded sample of each format's products the question is
"What is the price of the NAME?" (the word "price" is only in a table's header, or the
slide's or sentence's own words), and a result answers it when one chunk holds both the
product's name (in its text or its section: a slide's title) and its price. Reported per
format: the share of questions answered by the first result, the first 5 and the first 10
(hybrid search, pgrag's defaults).

With --through-libreoffice, every Word, Excel and PowerPoint file is first opened and saved
by LibreOffice (to OpenDocument and back), so that the files read are an office suite's own
exports. With --no-header-repeat, the same in a second collection chunked without the table header
repeated in each chunk (what pgrag did before issue 20), to measure what it is worth.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/formats_eval.py --no-header-repeat \\
        --out formats-eval.json

Scanned pages are PDFs of page images (no text layer), read by OCR (the ocr extra and
Tesseract must be installed: docs/ingest.md#ocr-scans-and-images).
"""

from __future__ import annotations

import argparse
import email.policy
import json
import mailbox
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402

MARKER = "pgrag benchmark: formats_eval"
KS = (1, 5, 10)
COLOURS = """amber azure beige bronze cobalt copper coral crimson ebony emerald golden granite
    hazel indigo ivory jade lemon lilac maroon mint ochre olive onyx pearl plum ruby rust sable
    saffron scarlet silver slate teal topaz umber violet""".split()
THINGS = """kettle toaster lantern blender stool ladder kettlebell backpack thermos grinder
    skillet teapot compass hammock tripod monitor keyboard speaker headset charger router
    printer scanner projector heater fan lamp mirror clock radio""".split()
CITIES = """Lisbon Porto Braga Coimbra Faro Madrid Seville Valencia Bilbao Lyon Nantes Lille
    Bordeaux Turin Genoa Naples Bologna Verona Graz Linz Ghent Utrecht Leiden Aarhus
    Malmo""".split()
HEADER = ["Product", "Price", "Warehouse", "Lead time"]


@dataclass(frozen=True)
class Product:
    name: str
    price: str
    city: str
    lead: str

    def row(self) -> list[str]:
        return [self.name, self.price, self.city, self.lead]


def catalogue(rng: random.Random, n: int) -> list[Product]:
    names: set[str] = set()
    out = []
    while len(out) < n:
        colour, thing = rng.choice(COLOURS), rng.choice(THINGS)  # (this order: seeded sets)
        name = f"{colour} {thing} {rng.choice('KLMNPRSTVX')}-{rng.randint(100, 999)}"
        if name in names:
            continue
        names.add(name)
        out.append(
            Product(
                name, f"{rng.randint(5, 900)} EUR", rng.choice(CITIES), f"{rng.randint(1, 40)} days"
            )
        )
    return out


# -- writers: each writes its files for its products into a directory -----------------------


def write_csv(folder: Path, groups: list[list[Product]]) -> None:
    import csv

    for i, group in enumerate(groups):
        with (folder / f"price-list-{i}.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(HEADER)
            w.writerows(p.row() for p in group)


def write_markdown(folder: Path, groups: list[list[Product]]) -> None:
    for i, group in enumerate(groups):
        lines = [f"# Catalogue part {i}", "", "Our current range.", ""]
        lines += ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * 4]
        lines += ["| " + " | ".join(p.row()) + " |" for p in group]
        (folder / f"catalogue-{i}.md").write_text("\n".join(lines) + "\n")


def write_html(folder: Path, groups: list[list[Product]]) -> None:
    for i, group in enumerate(groups):
        rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in p.row()) + "</tr>" for p in group)
        head = "".join(f"<th>{h}</th>" for h in HEADER)
        (folder / f"range-{i}.html").write_text(
            f"<!DOCTYPE html><html><head><title>Range {i}</title></head><body><h1>Range {i}</h1>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></body></html>"
        )


def write_xlsx(folder: Path, groups: list[list[Product]]) -> None:
    import openpyxl

    for i in range(0, len(groups), 2):
        book = openpyxl.Workbook()
        book.remove(book.active)
        for j, group in enumerate(groups[i : i + 2]):
            sheet = book.create_sheet(f"Stock {i + j}")
            sheet.append(HEADER)
            for p in group:
                sheet.append(p.row())
        book.save(str(folder / f"stock-{i // 2}.xlsx"))


def write_docx(folder: Path, groups: list[list[Product]]) -> None:
    import docx

    for i, group in enumerate(groups):
        doc = docx.Document()
        doc.add_heading(f"Supplier report {i}", level=1)
        doc.add_paragraph("The table lists what this supplier sells and where it is stocked.")
        table = doc.add_table(rows=1, cols=4)
        for cell, text in zip(table.rows[0].cells, HEADER, strict=True):
            cell.text = text
        for p in group:
            for cell, text in zip(table.add_row().cells, p.row(), strict=True):
                cell.text = text
        doc.save(str(folder / f"supplier-{i}.docx"))


def write_pptx(folder: Path, groups: list[list[Product]]) -> None:
    import pptx

    for i, group in enumerate(groups):
        deck = pptx.Presentation()
        for p in group:
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = f"Spotlight: {p.name}"
            body = slide.placeholders[1].text_frame
            body.text = f"Price {p.price}"
            body.add_paragraph().text = f"Stocked in {p.city}"
            slide.notes_slide.notes_text_frame.text = f"Delivery takes {p.lead}."
        deck.save(str(folder / f"spotlights-{i}.pptx"))


def write_epub(folder: Path, groups: list[list[Product]]) -> None:
    from tests.samples import epub_book

    chapters = []
    for i, group in enumerate(groups):
        text = "".join(
            f"<p>The {p.name} sells at a price of {p.price} and ships from {p.city}.</p>"
            for p in group
        )
        chapters.append((f"Almanac part {i}", f"<h1>Almanac part {i}</h1>{text}"))
    epub_book(folder / "almanac.epub", "The product almanac", "Formats eval", chapters)


def write_eml(folder: Path, groups: list[list[Product]]) -> None:
    """Each message carries its products as a CSV attachment; the body only names the file."""
    for i, group in enumerate(groups):
        message = EmailMessage()
        message["From"] = "Purchasing <buy@example.com>"
        message["To"] = "Sales <sales@example.com>"
        message["Date"] = "Thu, 03 Dec 2026 09:15:00 +0000"
        message["Subject"] = f"Updated list {i}"
        message["Message-ID"] = f"<list-{i}@example.com>"
        message.set_content("Hello,\n\nThe updated list is attached.\n")
        rows = "\n".join(",".join(p.row()) for p in group)
        message.add_attachment(
            (",".join(HEADER) + "\n" + rows + "\n").encode(),
            maintype="text",
            subtype="csv",
            filename=f"list-{i}.csv",
        )
        (folder / f"list-{i}.eml").write_bytes(message.as_bytes(policy=email.policy.SMTP))


def write_mbox(folder: Path, groups: list[list[Product]]) -> None:
    box = mailbox.mbox(folder / "quotes.mbox")
    for group in groups:
        for k, p in enumerate(group):
            message = EmailMessage()
            message["From"] = "Quotes <quotes@example.com>"
            message["To"] = "Sales <sales@example.com>"
            message["Subject"] = f"Quote for the {p.name}"
            message["Message-ID"] = f"<quote-{abs(hash(p.name))}-{k}@example.com>"
            message.set_content(f"We can offer the {p.name} at {p.price}, from {p.city}.\n")
            box.add(message)
    box.flush()
    box.close()


def write_pdf(folder: Path, groups: list[list[Product]]) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    for i, group in enumerate(groups):
        doc = SimpleDocTemplate(str(folder / f"price-sheet-{i}.pdf"), pagesize=A4)
        doc.build(
            [
                Paragraph(f"Price sheet {i}", styles["Title"]),
                Table([HEADER] + [p.row() for p in group]),
            ]
        )


def write_scans(folder: Path, groups: list[list[Product]]) -> None:
    """Scanned price sheets: each a PDF of one page image (no text layer), read by OCR."""
    from tests.samples import write_scanned_pdf

    for i, group in enumerate(groups):
        lines = [f"Price sheet {i} (scanned)"]
        lines += [f"{p.name}: price {p.price}, from {p.city}" for p in group]
        write_scanned_pdf(folder / f"scan-{i}.pdf", [lines])


# format: (writer, files, products per file)
FORMATS: dict[str, tuple[Callable[[Path, list[list[Product]]], None], int, int]] = {
    "csv": (write_csv, 3, 60),
    "markdown": (write_markdown, 3, 60),
    "html": (write_html, 3, 60),
    "xlsx": (write_xlsx, 4, 60),
    "docx": (write_docx, 3, 60),
    "pdf": (write_pdf, 3, 40),
    "pptx": (write_pptx, 2, 20),
    "epub": (write_epub, 4, 30),
    "email attachment": (write_eml, 3, 60),
    "mbox": (write_mbox, 2, 30),
    "scanned PDF (OCR)": (write_scans, 4, 5),
}


def build(root: Path, seed: int) -> dict[str, list[Product]]:
    rng = random.Random(seed)
    total = sum(files * per for _, files, per in FORMATS.values())
    products = catalogue(rng, total)
    out: dict[str, list[Product]] = {}
    for name, (writer, files, per) in FORMATS.items():
        mine, products = products[: files * per], products[files * per :]
        folder = root / name.replace(" ", "-")
        folder.mkdir(parents=True)
        writer(folder, [mine[k * per : (k + 1) * per] for k in range(files)])
        out[name] = mine
    return out


ODF = {".docx": "odt", ".xlsx": "ods", ".pptx": "odp"}


def through_libreoffice(root: Path) -> int:
    """Every Word, Excel and PowerPoint file replaced by LibreOffice's own export of it: opened
    and saved as OpenDocument, then opened and saved back (`soffice --headless --convert-to`),
    so that what pgrag reads was written by an office suite, not by the Python libraries."""
    import shutil
    import subprocess

    soffice = shutil.which("soffice")
    if soffice is None:
        sys.exit(
            "--through-libreoffice: install LibreOffice"
            " (apt-get install libreoffice-writer-nogui libreoffice-calc-nogui ...)"
        )
    done = 0
    for path in sorted(p for p in root.rglob("*") if p.suffix in ODF):
        with tempfile.TemporaryDirectory() as tmp:
            odf = Path(tmp) / f"{path.stem}.{ODF[path.suffix]}"
            for source, kind, out in (
                (path, ODF[path.suffix], tmp),
                (odf, path.suffix[1:], str(path.parent)),
            ):
                subprocess.run(
                    [soffice, "--headless", "--convert-to", kind, "--outdir", out, str(source)],
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
        done += 1
    return done


def evaluate(
    db: Any, collection: str, products: dict[str, list[Product]], questions: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed + 1)
    result: dict[str, Any] = {}
    for name, mine in products.items():
        asked = rng.sample(mine, min(questions, len(mine)))
        found = {k: 0 for k in KS}
        for p in asked:
            hits = pgrag.search(
                db, f"What is the price of the {p.name}?", collection=collection, k=max(KS)
            )
            # (a slide's or chapter's heading is the chunk's section, shown with it)
            first = next(
                (
                    r
                    for r, h in enumerate(hits, 1)
                    if p.name in f"{h.section or ''}\n{h.text}" and p.price in h.text
                ),
                None,
            )
            for k in KS:
                found[k] += first is not None and first <= k
        result[name] = {
            "questions": len(asked),
            **{f"answer@{k}": found[k] / len(asked) for k in KS},
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40, help="per format")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dsn", help="server (default: PGRAG_DSN, PG*, the embedded server)")
    parser.add_argument("--no-header-repeat", action="store_true", help="also measure without")
    parser.add_argument(
        "--through-libreoffice",
        action="store_true",
        help="office files as LibreOffice exports them (round-tripped through OpenDocument)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    dsn = fresh_database(args.dsn, "pgrag_bench_formats", MARKER)
    report: dict[str, Any] = {"questions per format": args.questions, "seed": args.seed}
    with tempfile.TemporaryDirectory() as tmp:
        products = build(Path(tmp), args.seed)
        if args.through_libreoffice:
            log("saving every office file again with LibreOffice")
            report["exported by LibreOffice"] = through_libreoffice(Path(tmp))
        db = pgrag.connect(dsn)
        try:
            log("ingesting every format")
            ingest = pgrag.ingest(db, [Path(tmp)], collection="formats")
            report["ingest"] = {
                "added": ingest.count("added"),
                "failed": [f"{f.path}: {f.reason}" for f in ingest.failed],
                "chunks": ingest.chunks_written,
            }
            report["header repeated"] = evaluate(db, "formats", products, args.questions, args.seed)
            if args.no_header_repeat:
                from pgrag.text import chunking

                original = chunking.table_headers
                chunking.table_headers = lambda units: [None] * len(units)  # type: ignore[assignment]
                try:
                    log("ingesting again, no header repeated")
                    pgrag.ingest(db, [Path(tmp)], collection="formats-plain")
                finally:
                    chunking.table_headers = original  # type: ignore[assignment]
                report["header not repeated"] = evaluate(
                    db, "formats-plain", products, args.questions, args.seed
                )
        finally:
            db.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
