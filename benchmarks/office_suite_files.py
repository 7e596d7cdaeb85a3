"""Files exported by an office suite (issue 20's check: "office suites' own exports"): each
known fact written into a source document, the document converted by LibreOffice (headless)
to the format a user would have, ingested, and asked about with hybrid search.

Sources (made here, so the facts are known): an HTML report with headings, a ruled table,
a footnote-like aside and a list; a CSV ledger; a slide deck written by python-pptx. Each is
converted by LibreOffice's own filters: Word (.docx), PDF (Writer's PDF export), EPUB
(Writer's EPUB export, from the report saved as OpenDocument), OpenDocument text and Word 97
(.doc) for the report (the last two pgrag refuses, with a line saying to convert them); Excel (.xlsx)
and PDF for the ledger; PowerPoint (.pptx) and PDF for the deck. A fact counts as found when
its answer string is in one of the top 5 hybrid results of its question, in the collection
holding only that file.

    apt-get install libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui
    PYTHONPATH=$PWD .venv/bin/python benchmarks/office_suite_files.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402

MARKER = "pgrag benchmarks/office_suite_files.py"

REPORT = """<html><head><title>Harbour report</title></head><body>
<h1>Harbour report</h1>
<p>The harbour of Velmora handled more cargo this year than in any year before.</p>
<h2>Berths</h2>
<table border="1" cellpadding="4">
<tr><th>Berth</th><th>Depth</th><th>Operator</th></tr>
<tr><td>North quay</td><td>14.5 m</td><td>Saltline Logistics</td></tr>
<tr><td>Grain pier</td><td>11.2 m</td><td>Ostrander Milling</td></tr>
<tr><td>Ferry slip</td><td>7.9 m</td><td>Kestrel Ferries</td></tr>
</table>
<h2>Safety</h2>
<ul><li>Pilots board at the Quillon buoy.</li><li>Speed in the basin is limited to 6 knots.</li></ul>
<p><i>Note: the dredging contract was awarded to Brackwater Marine.</i></p>
</body></html>
"""
REPORT_FACTS = [
    ("Which operator runs the grain pier?", "Ostrander Milling"),
    ("How deep is the ferry slip?", "7.9 m"),
    ("Where do pilots board?", "Quillon buoy"),
    ("Who was awarded the dredging contract?", "Brackwater Marine"),
]
LEDGER = "Invoice,Customer,Amount,Due\n" + "\n".join(
    f"INV-{1000 + i},{name},{amount},2026-0{1 + i % 9}-15"
    for i, (name, amount) in enumerate(
        [("Halvorsen Bakery", "1200.50"), ("Tamsin Optics", "830.00"), ("Ubrecht Farms", "77.25")]
        * 40
    )
)
LEDGER_FACTS = [
    ("What does Tamsin Optics owe on invoice INV-1001?", "830"),
    ("Which customer is on invoice INV-1002?", "Ubrecht Farms"),
]
DECK_FACTS = [
    ("What is the launch city?", "Port Averill"),
    ("Who presents the budget?", "Ingrid Solvang"),
    ("What do the speaker notes say about the venue?", "Lumen Hall"),
]


def write_deck(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Launch plan"
    slide.placeholders[1].text = "The launch city is Port Averill, in spring."
    slide.notes_slide.notes_text_frame.text = "The venue is Lumen Hall, booked for two days."
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Budget"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    box.text_frame.text = "Ingrid Solvang presents the budget on day two."
    deck.save(str(path))


def convert(source: Path, to: str, out: Path) -> Path | None:
    """LibreOffice's conversion of ``source`` to ``to`` (e.g. "docx", "pdf"), or None."""
    profile = out.parent / "lo-profile"
    proc = subprocess.run(
        ["soffice", f"-env:UserInstallation=file://{profile}", "--headless", "--convert-to", to]
        + ["--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    made = out / f"{source.stem}.{to.split(':')[0]}"
    if proc.returncode != 0 or not made.exists():
        log(f"  {source.name} -> {to}: failed ({proc.stderr.strip()[:200]})")
        return None
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_office_suite")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("soffice") is None:
        sys.exit("LibreOffice is not installed: apt-get install libreoffice-writer-nogui ...")
    work = Path(tempfile.mkdtemp(prefix="pgrag-office-suite-"))
    sources = work / "sources"
    sources.mkdir()
    (sources / "report.html").write_text(REPORT)
    (sources / "ledger.csv").write_text(LEDGER)
    write_deck(sources / "deck.pptx")
    convert(sources / "report.html", "odt", sources)  # (Writer's EPUB export reads a text)
    plans: list[tuple[Path, str, list[tuple[str, str]]]] = [
        (sources / "report.html", "docx:MS Word 2007 XML", REPORT_FACTS),
        (sources / "report.html", "odt", REPORT_FACTS),
        (sources / "report.html", "pdf:writer_web_pdf_Export", REPORT_FACTS),
        (sources / "report.odt", "epub:EPUB", REPORT_FACTS),
        (sources / "report.html", "doc:MS Word 97", REPORT_FACTS),
        (sources / "ledger.csv", "xlsx:Calc MS Excel 2007 XML", LEDGER_FACTS),
        (sources / "ledger.csv", "pdf:calc_pdf_Export", LEDGER_FACTS),
        (sources / "deck.pptx", "pptx:Impress MS PowerPoint 2007 XML", DECK_FACTS),
        (sources / "deck.pptx", "pdf:impress_pdf_Export", DECK_FACTS),
    ]
    dsn = fresh_database(args.dsn, args.database, MARKER)
    rows: list[dict[str, Any]] = []
    try:
        with pgrag.connect(dsn) as db:
            for n, (source, to, facts) in enumerate(plans):
                out = work / f"out{n}"
                out.mkdir()
                made = convert(source, to, out)
                row: dict[str, Any] = {"source": source.name, "export": to, "file": None}
                rows.append(row)
                if made is None:
                    continue
                row["file"] = made.name
                collection = f"suite{n}"
                report = pgrag.ingest(db, [made], collection=collection)
                failed = [f for f in report.files if f.status == "failed"]
                row["ingest"] = "failed: " + (failed[0].reason or "") if failed else "read"
                found = 0
                for question, answer in facts if not failed else []:
                    hits = pgrag.search(db, question, collection=collection, k=5)
                    found += any(answer in h.text for h in hits)
                row["found"] = f"{found}/{len(facts)}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    print("| made from | LibreOffice export | ingest | facts found (top 5) |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['source']} | {r['export']} | {r.get('ingest', 'not made')} |"
            f" {r.get('found', '-')} |"
        )


if __name__ == "__main__":
    main()
