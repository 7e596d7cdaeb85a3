"""Which PDF reader keeps tables best (issue 20, item 2), on tables generated from known cells.

PDFs are drawn with reportlab in six table styles that documents really use, each table
between paragraphs of prose:

- grid: every cell ruled (invoices, forms);
- rules: only lines above and below the header and under the last row (reports, papers);
- plain: no lines at all, columns aligned by position (statements, plain-text exports);
- wrapped: ruled cells whose text wraps onto two or three lines (specifications);
- long: a ruled table of 90 rows over several pages, its header repeated on each;
- sparse: a ruled table with empty cells.

Each reader's output for a page is Markdown; from it are taken the table rows (lines between
pipes). Reported per style and reader:

- rows: the share of the tables' body rows found as a row with exactly the right cells
  (whitespace collapsed, a wrapped cell joined by spaces);
- header: the share of table pieces (a table on one page) whose header row is a Markdown
  header (followed by a delimiter row), so the chunker repeats it in every chunk of the table;
- prose: the share of the prose sentences still found whole in the page's text (a reader that
  turns prose into table cells or drops it loses them);
- s/page: reading time per page (the fastest of --repeat reads of the file).

Readers: pgrag's own (pypdf's layout mode, a row per line, header rows marked:
pgrag.ingest.formats.pdf), pdfplumber (its ruled-line tables, the rest of the page as
text), camelot (lattice for ruled tables, stream for the rest) and pymupdf4llm (AGPL-3.0,
so measured for reference only: pgrag is Apache-2.0). A reader that is not installed is
left out of the table.

    PYTHONPATH=$PWD python benchmarks/pdf_tables_eval.py --tables 6

needs reportlab and pypdf (the test extra), and for the others
`pip install pdfplumber camelot-py pymupdf4llm` (in a separate virtualenv: camelot brings
OpenCV and pandas, pymupdf4llm is AGPL).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STYLES = ("grid", "rules", "plain", "wrapped", "long", "sparse")
WORDS = (
    "amber basalt cobalt delta ember fjord granite harbor indigo juniper kestrel lumen "
    "meadow nickel opal prairie quartz russet sable tundra umber vale willow yarrow zephyr"
).split()
CITIES = ["Lisbon", "Osaka", "Quito", "Tromsø", "Perth", "Nairobi", "Tallinn", "Cusco"]
HEADERS = ["Item", "Code", "Price", "Origin", "Stock", "Shipped", "Grade"]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    style: str


@dataclass
class Sample:
    style: str
    tables: list[Table] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)


def _cell(rng: random.Random, column: str, style: str) -> str:
    if style == "sparse" and column not in ("Item", "Code") and rng.random() < 0.3:
        return ""
    if column == "Item":
        n = rng.randint(6, 12) if style == "wrapped" else rng.randint(1, 3)
        return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize()
    if column == "Code":
        return f"{rng.choice('ABCDEFGHJK')}{rng.choice('LMNPRSTVWX')}-{rng.randint(100, 9999)}"
    if column == "Price":
        return f"{rng.randint(1, 4999)}.{rng.randint(0, 99):02d}"
    if column == "Origin":
        return rng.choice(CITIES)
    if column == "Stock":
        return str(rng.randint(0, 20000))
    if column == "Shipped":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return rng.choice(["A", "B", "C", "A+", "B-"])


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(12, 20))]
    return " ".join(words).capitalize() + "."


def make_sample(rng: random.Random, style: str, tables: int) -> Sample:
    sample = Sample(style)
    codes: set[str] = set()
    for _ in range(tables):
        columns = rng.randint(3, 6)
        header = ["Item", "Code", *rng.sample(HEADERS[2:], columns - 2)]  # (codes find a table)
        if style == "wrapped":
            header = header[:4]
        count = 90 if style == "long" else rng.randint(6, 14)
        rows = [[_cell(rng, c, style) for c in header] for _ in range(count)]
        for row in rows:  # (a code names one row of one table: pieces are found by it)
            while row[1] in codes:
                row[1] = _cell(rng, "Code", style)
            codes.add(row[1])
        sample.tables.append(Table(header, rows, style))
        sample.prose.append(" ".join(_sentence(rng) for _ in range(3)))
    return sample


def write_pdf(sample: Sample, path: Path) -> None:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer
    from reportlab.platypus import Table as PdfTable

    styles = getSampleStyleSheet()
    body = styles["BodyText"]
    flow: list = []
    for k, (table, prose) in enumerate(zip(sample.tables, sample.prose, strict=True)):
        flow.append(Paragraph(f"Section {k + 1}", styles["Heading2"]))
        flow.append(Paragraph(prose, body))
        flow.append(Spacer(1, 8))
        cells: list[list] = [list(table.header)]
        for row in table.rows:
            if table.style == "wrapped":
                cells.append([Paragraph(c, body) if i == 0 else c for i, c in enumerate(row)])
            else:
                cells.append(list(row))
        widths = [200, 70, 70, 70] if table.style == "wrapped" else None
        pdf_table = PdfTable(cells, colWidths=widths, repeatRows=1)
        commands: list[tuple] = [("VALIGN", (0, 0), (-1, -1), "TOP")]
        if table.style in ("grid", "wrapped", "long", "sparse"):
            commands.append(("GRID", (0, 0), (-1, -1), 0.5, colors.black))
        elif table.style == "rules":
            commands += [
                ("LINEABOVE", (0, 0), (-1, 0), 1, colors.black),
                ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.black),
                ("LINEBELOW", (0, -1), (-1, -1), 1, colors.black),
            ]
        pdf_table.setStyle(commands)
        flow.append(pdf_table)
        flow.append(Spacer(1, 12))
    SimpleDocTemplate(str(path), pagesize=A4).build(flow)


# --- readers: a PDF's path -> Markdown per page -------------------------------------------


def read_pgrag(path: Path) -> list[str]:
    from pgrag.ingest.formats.pdf import pdf_pages

    with path.open("rb") as fh:
        pages, _ = pdf_pages(fh, path)
    return pages


def read_pypdf(path: Path) -> list[str]:
    """pgrag before its ruled tables were read by pdfplumber: pypdf's layout text alone."""
    from pgrag.ingest.formats.pdf import pdf_pages

    with path.open("rb") as fh:
        pages, _ = pdf_pages(fh)
    return pages


def _markdown_rows(rows: list[list[str | None]]) -> list[str]:
    out = []
    for k, row in enumerate(rows):
        cells = [" ".join((c or "").split()).replace("|", "\\|") for c in row]
        out.append("| " + " | ".join(cells) + " |")
        if k == 0:
            out.append("|" + " --- |" * len(cells))
    return out


def read_pdfplumber(path: Path) -> list[str]:
    import pdfplumber

    pages = []
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            found = page.find_tables()
            boxes = [t.bbox for t in found]

            def outside(obj: dict, boxes: list = boxes) -> bool:
                x = (obj["x0"] + obj["x1"]) / 2
                y = (obj["top"] + obj["bottom"]) / 2
                return not any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in boxes)

            parts = [page.filter(outside).extract_text() or ""]
            for table in found:
                parts.append("\n".join(_markdown_rows(table.extract())))
            pages.append("\n\n".join(parts))
    return pages


def read_camelot(path: Path) -> list[str]:
    import camelot
    import pypdf

    count = len(pypdf.PdfReader(path).pages)
    pages = []
    for n in range(1, count + 1):
        tables = list(camelot.read_pdf(str(path), pages=str(n), flavor="lattice"))
        if not tables:
            tables = list(camelot.read_pdf(str(path), pages=str(n), flavor="stream"))
        text = pypdf.PdfReader(path).pages[n - 1].extract_text() or ""
        parts = [text] + ["\n".join(_markdown_rows(t.df.values.tolist())) for t in tables]
        pages.append("\n\n".join(parts))
    return pages


def read_pymupdf4llm(path: Path) -> list[str]:
    import pymupdf4llm

    chunks = pymupdf4llm.to_markdown(str(path), page_chunks=True, show_progress=False)
    return [c["text"] for c in chunks]


READERS: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "pgrag": ("pdfplumber", read_pgrag),
    "pypdf layout (pgrag before)": ("pypdf", read_pypdf),
    "pdfplumber": ("pdfplumber", read_pdfplumber),
    "camelot": ("camelot", read_camelot),
    "pymupdf4llm (AGPL)": ("pymupdf4llm", read_pymupdf4llm),
}


# --- scoring --------------------------------------------------------------------------------

_DELIMITER = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+$")


def _norm(cell: str) -> str:
    cell = cell.replace("<br>", " ").replace("\\|", "|").replace("**", "")
    return " ".join(cell.split())


def _cells(line: str) -> tuple[str, ...]:
    inner = line.strip()[1:-1]
    return tuple(_norm(c) for c in re.split(r"(?<!\\)\|", inner))


def table_rows(page: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(every table row, the rows marked as a header) in a page's Markdown."""
    lines = [ln.strip() for ln in page.splitlines()]
    rows, headers = [], []
    for k, line in enumerate(lines):
        if not (line.startswith("|") and line.endswith("|") and len(line) > 1):
            continue
        if _DELIMITER.match(line.replace(" ", "")):
            continue
        cells = _cells(line)
        rows.append(cells)
        following = lines[k + 1].replace(" ", "") if k + 1 < len(lines) else ""
        if _DELIMITER.match(following):
            headers.append(cells)
    return rows, headers


def score(sample: Sample, pages: list[str]) -> dict[str, float]:
    found: set[tuple[str, ...]] = set()
    headers: list[tuple[str, ...]] = []
    for page in pages:
        rows, marked = table_rows(page)
        found.update(rows)
        headers += marked
    body = [tuple(_norm(c) for c in row) for t in sample.tables for row in t.rows]
    rows_hit = sum(row in found for row in body) / len(body)
    # table pieces: a table's part on one page, found by its rows' codes on that page
    pieces = hits = 0
    for table in sample.tables:
        want = tuple(_norm(c) for c in table.header)
        for page in pages:
            if not any(re.search(rf"\b{re.escape(row[1])}\b", page) for row in table.rows):
                continue
            pieces += 1
            hits += want in page_headers(page)
    flat = " ".join(" ".join(p.split()) for p in pages)
    sentences = [s.strip() + "." for text in sample.prose for s in text.split(".") if s.strip()]
    prose = sum(s in flat for s in sentences) / len(sentences)
    return {"rows": rows_hit, "header": hits / max(pieces, 1), "prose": prose}


def page_headers(page: str) -> list[tuple[str, ...]]:
    return table_rows(page)[1]


def available(module: str) -> bool:
    try:
        __import__(module)
    except Exception:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=6, help="tables per style")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument(
        "--repeat", type=int, default=3, help="reads of each PDF (the fastest counts)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    readers = {name: read for name, (module, read) in READERS.items() if available(module)}
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for style in STYLES:
            sample = make_sample(rng, style, args.tables)
            path = Path(tmp) / f"{style}.pdf"
            write_pdf(sample, path)
            for name, read in readers.items():
                seconds = float("inf")
                pages: list[str] = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    try:
                        sink = io.StringIO()
                        stdout, sys.stdout = sys.stdout, sink  # (camelot and pymupdf print)
                        try:
                            pages = read(path)
                        finally:
                            sys.stdout = stdout
                    except Exception as err:  # a reader that fails on a style scores 0 there
                        print(
                            f"{name} failed on {style}: {type(err).__name__}: {err}",
                            file=sys.stderr,
                        )
                        pages = []
                        break
                    seconds = min(seconds, time.perf_counter() - start)
                figures = (
                    score(sample, pages)
                    if pages
                    else dict.fromkeys(("rows", "header", "prose"), 0.0)
                )
                figures["s/page"] = seconds / max(len(pages), 1)
                figures["pages"] = len(pages)
                results.setdefault(style, {})[name] = figures

    names = list(readers)
    print(f"| style | figure | {' | '.join(names)} |")
    print("|" + " --- |" * (len(names) + 2))
    for style, by_reader in results.items():
        for figure in ("rows", "header", "prose", "s/page"):
            cells = [f"{by_reader[n][figure]:.3f}" for n in names]
            print(f"| {style} | {figure} | {' | '.join(cells)} |")
    for figure in ("rows", "header", "prose"):
        means = [sum(results[s][n][figure] for s in results) / len(results) for n in names]
        print(f"| mean | {figure} | {' | '.join(f'{m:.3f}' for m in means)} |")
    total = [
        sum(results[s][n]["s/page"] * results[s][n]["pages"] for s in results)
        / max(sum(results[s][n]["pages"] for s in results), 1)
        for n in names
    ]
    print(f"| all | s/page | {' | '.join(f'{t:.3f}' for t in total)} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
