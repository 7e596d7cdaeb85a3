"""Sample inputs that unit and integration tests share: documents in each format, a format
module for the registry, and a tiny SQuAD file with known answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pgrag.ingest import formats
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.loaders import LoadedFile, load_path

# --- formats (tests/unit/test_formats.py, tests/integration/test_formats.py) ----------------

HTML = """<!DOCTYPE html>
<html><head><title>Billing help</title><script>var tracking = "refund-script";</script>
<style>.x { color: red }</style></head>
<body>
<header class="site-header"><a href="/">Home</a> <a href="/about">About the navigation</a></header>
<nav><ul><li><a href="/">Home</a></li><li>Pricing menu</li></ul></nav>
<main><article>
<header><h1>Refunds</h1></header>
<p>Refunds are processed within <b>5 business days</b>.</p>
<h2>Digital goods</h2>
<ul><li>Ebooks: no refund after download.</li><li>Courses: refund within 14 days.</li></ul>
<table><tr><th>Plan</th><th>Window</th></tr><tr><td>Monthly</td><td>14 days</td></tr>
<tr><td>Annual</td><td>30 days</td></tr></table>
<p># not a heading</p>
</article></main>
<div class="cookie-banner">We use cookies</div>
<footer>Copyright 2026 ACME</footer>
</body></html>
"""


def load_one(path: Path, fields: JsonlFields | None = None) -> LoadedFile:
    items = list(load_path(path, fields))
    assert len(items) == 1, items
    label, item = items[0]
    assert label == str(path)
    assert isinstance(item, LoadedFile), item
    return item


def write_pdf(path: Path, title: str = "Annual report") -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    doc = SimpleDocTemplate(str(path), pagesize=A4, title=title)
    doc.build(
        [
            Paragraph("Annual report", styles["Title"]),
            Paragraph(
                "Revenue grew in every region. The board approved a dividend.", styles["Normal"]
            ),
            PageBreak(),
            Paragraph("Regional results", styles["Heading2"]),
            Table(
                [["Region", "Revenue", "Growth"], ["North", "120", "5%"], ["South", "80", "12%"]]
            ),
            Paragraph("Refunds fell by a third after the new policy.", styles["Normal"]),
        ]
    )
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


RST_FORMAT = '''
"""reStructuredText, for the test: a title underlined with ===, read as plain text."""

import re

NAME = "rst"
LABEL = "reStructuredText"
SUFFIXES = (".rst",)
ORDER = 350

_TITLE = re.compile(r"^(\\S.*)\\n=+\\s*$", re.M)


def detect(sample):
    return sample.known == NAME


def convert(text):
    match = _TITLE.search(text)
    return text, match.group(1).strip() if match else None
'''


def package_with(tmp_path: Path, name: str, modules: dict[str, str]) -> str:
    """A package of format modules on sys.path: copies of pgrag's, plus ``modules``."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module in Path(formats.__file__).parent.glob("*.py"):
        if module.name != "__init__.py":
            (package / module.name).write_text(module.read_text())
    for module_name, source in modules.items():
        (package / f"{module_name}.py").write_text(source)
    return name


# --- answer evaluation (tests/*/test_answer_eval.py) -------------------------------------

# Ten paragraphs on unrelated subjects, two questions each; answers are unique strings.
PARAGRAPHS = [
    (
        "Volcanoes",
        "Mount Tambora erupted in 1815 and caused the year without a summer in Europe. Its"
        " plume reached the stratosphere.",
        [
            ("When did Mount Tambora erupt?", "1815"),
            ("What did the eruption of Tambora cause in Europe?", "the year without a summer"),
        ],
    ),
    (
        "Bees",
        "Honey bees communicate the direction of flowers with a waggle dance. A colony may"
        " hold about 60,000 workers in summer.",
        [
            ("How do honey bees tell others where flowers are?", "a waggle dance"),
            ("How many workers may a bee colony hold in summer?", "about 60,000"),
        ],
    ),
    (
        "Chess",
        "The Sicilian Defence begins with the moves 1.e4 c5. Bobby Fischer played it as"
        " Black in most of his games against 1.e4.",
        [
            ("Which moves begin the Sicilian Defence?", "1.e4 c5"),
            ("Which player used the Sicilian as Black against 1.e4?", "Bobby Fischer"),
        ],
    ),
    (
        "Bread",
        "Sourdough bread rises because of wild yeast and lactic acid bacteria in the starter."
        " A starter is fed with flour and water every day.",
        [
            ("What makes sourdough bread rise?", "wild yeast and lactic acid bacteria"),
            ("What is a sourdough starter fed with?", "flour and water"),
        ],
    ),
    (
        "Rivers",
        "The Danube flows through ten countries and empties into the Black Sea. Vienna and"
        " Budapest lie on its banks.",
        [
            ("Into which sea does the Danube empty?", "the Black Sea"),
            ("Through how many countries does the Danube flow?", "ten"),
        ],
    ),
    (
        "Telescopes",
        "The Hubble Space Telescope was launched in 1990 aboard the shuttle Discovery. Its"
        " mirror is 2.4 metres across.",
        [
            ("When was the Hubble Space Telescope launched?", "1990"),
            ("How wide is Hubble's mirror?", "2.4 metres"),
        ],
    ),
    (
        "Cycling",
        "The Tour de France was first held in 1903. The leader of the general classification"
        " wears the yellow jersey.",
        [
            ("When was the first Tour de France held?", "1903"),
            ("What does the leader of the Tour de France wear?", "the yellow jersey"),
        ],
    ),
    (
        "Coffee",
        "Espresso is made by forcing hot water through finely ground coffee at about nine"
        " bars of pressure. A ristretto uses less water.",
        [
            ("At what pressure is espresso brewed?", "about nine bars"),
            ("Which espresso drink uses less water?", "a ristretto"),
        ],
    ),
    (
        "Glaciers",
        "The Aletsch Glacier in the Swiss Alps is the largest glacier in the Alps. It has"
        " retreated by more than three kilometres since 1870.",
        [
            ("Which is the largest glacier in the Alps?", "the Aletsch Glacier"),
            ("How far has the Aletsch Glacier retreated since 1870?", "more than three kilometres"),
        ],
    ),
    (
        "Typography",
        "Garamond is an old-style serif typeface named after Claude Garamond, a Parisian"
        " punch-cutter of the sixteenth century.",
        [
            ("After whom is the Garamond typeface named?", "Claude Garamond"),
            ("What kind of typeface is Garamond?", "an old-style serif typeface"),
        ],
    ),
]
ANSWERS = {q: a for _, _, qas in PARAGRAPHS for q, a in qas}


def squad_file(path: Path) -> Path:
    data = {
        "version": "1.1",
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": f"{title}-{i}",
                                "question": q,
                                "answers": [{"text": a, "answer_start": context.find(a)}],
                            }
                            for i, (q, a) in enumerate(qas)
                        ],
                    }
                ],
            }
            for title, context, qas in PARAGRAPHS
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- office files, written by their libraries from known content -------------------------------

PRICE_ROWS = [(f"WX-{i:03d}", f"Widget model {i}", 10 + 3 * i) for i in range(60)]


def write_docx(path: Path) -> Path:
    import docx

    doc = docx.Document()
    doc.core_properties.title = "Supplier handbook"
    doc.add_paragraph("Supplier handbook", style="Title")
    doc.add_heading("Ordering", level=1)
    doc.add_paragraph("Orders are placed through the portal. Each order needs a purchase number.")
    doc.add_heading("Lead times", level=2)
    doc.add_paragraph("Standard parts ship within five working days.", style="List Bullet")
    doc.add_paragraph("Custom parts ship within six weeks.", style="List Bullet")
    doc.add_heading("Price list", level=1)
    doc.add_paragraph("# not a heading: a paragraph that starts with a hash")
    table = doc.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("SKU", "Product", "Price (EUR)"), strict=True):
        cell.text = text
    for sku, product, price in PRICE_ROWS:
        cells = table.add_row().cells
        cells[0].text, cells[1].text, cells[2].text = sku, product, str(price)
    doc.add_heading("Returns", level=1)
    doc.add_paragraph("Damaged goods are returned | within 30 days of delivery.")
    doc.save(str(path))
    return path


def write_xlsx(path: Path) -> Path:
    import datetime as dt

    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Prices"
    sheet.append(["SKU", "Product", "Price (EUR)", "Listed"])
    for i, (sku, product, price) in enumerate(PRICE_ROWS):
        sheet.append([sku, product, float(price), dt.date(2026, 1, 1 + i % 28)])
    offices = book.create_sheet("Offices")
    offices.append([None])  # a leading empty row: the header is the first row with values
    offices.append(["City", "Opens", "Staff"])
    offices.append(["Lisbon", dt.time(8, 0), 12])
    offices.append(["Porto", dt.time(9, 30), 7.5])
    book.properties.title = "Price workbook"
    book.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    layout = deck.slide_layouts[1]  # title and content
    slides = [
        (
            "Quarterly review",
            ["Revenue grew 12% over the quarter", "Costs were flat"],
            "Mention the Lisbon launch.",
        ),
        ("Hiring plan", ["Two engineers in Porto", "One designer"], ""),
    ]
    for heading, bullets, notes in slides:
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = heading
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            body.add_paragraph().text = bullet
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Regional figures"
    shape = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2))
    for r, row in enumerate([("Region", "Sales"), ("North", "120"), ("South", "95")]):
        for c, text in enumerate(row):
            shape.table.cell(r, c).text = text
    deck.core_properties.title = "Board deck"
    deck.save(str(path))
    return path


def epub_book(path: Path, title: str, author: str, chapters: list[tuple[str, str]]) -> Path:
    """An EPUB 3 book written with zipfile: (page title, body HTML) per chapter, in spine order,
    with a navigation page first (which readers skip)."""
    import zipfile

    items = "".join(
        f'<item id="c{n}" href="text/c{n}.xhtml" media-type="application/xhtml+xml"/>'
        for n in range(len(chapters))
    )
    spine = "".join(f'<itemref idref="c{n}"/>' for n in range(len(chapters)))
    opf = (
        '<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf"'
        ' version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">pgrag-test</dc:identifier><dc:title>{title}</dc:title>'
        f"<dc:creator>{author}</dc:creator><dc:language>en</dc:language></metadata>"
        '<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml"'
        f' properties="nav"/>{items}</manifest>'
        f'<spine><itemref idref="nav"/>{spine}</spine></package>'
    )
    container = (
        '<?xml version="1.0"?><container version="1.0"'
        ' xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr("META-INF/container.xml", container)
        z.writestr("OEBPS/content.opf", opf, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(
            "OEBPS/nav.xhtml", "<html><body><nav><ol><li>Contents</li></ol></nav></body></html>"
        )
        for n, (page_title, body) in enumerate(chapters):
            z.writestr(
                f"OEBPS/text/c{n}.xhtml",
                f'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
                f"<head><title>{page_title}</title></head><body>{body}</body></html>",
                compress_type=zipfile.ZIP_DEFLATED,
            )
    return path


def write_epub(path: Path) -> Path:
    return epub_book(
        path,
        "The Harbour Keeper",
        "A. Writer",
        [
            ("The lighthouse", "<h1>The lighthouse</h1><p>The lamp was lit at dusk by Mara.</p>"),
            ("Storm", "<p>The storm broke the north mooring on the third night.</p>"),
            ("Morning", "<h2>After</h2><p>By morning the ferry to Calder Island ran again.</p>"),
        ],
    )


def mail_message(
    subject: str, body: str, *, sender: str = "Ana Silva <ana@example.com>", msgid: str = ""
) -> Any:
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"] = sender
    message["To"] = "Team <team@example.com>"
    message["Date"] = "Thu, 03 Dec 2026 09:15:00 +0000"
    message["Subject"] = subject
    message["Message-ID"] = msgid or f"<{abs(hash(subject)) % 10**8}@example.com>"
    message.set_content(body)
    return message


def write_eml(path: Path, tmp: Path) -> Path:
    """A message with an HTML alternative and attachments: a CSV, a Word file, a message of
    its own, an inline image (skipped) and a damaged PDF (which fails on its own line)."""
    import email.policy

    message = mail_message(
        "Supplier prices for 2027",
        "Hello team,\n\nThe new price list is attached. The Lisbon depot closes on Fridays.\n",
        msgid="<prices-2027@example.com>",
    )
    message.add_alternative(
        "<p>Hello team,</p><p>The new <b>price list</b> is attached.</p>", subtype="html"
    )
    message.add_attachment(
        b"sku,price\nWX-001,13 EUR\nWX-002,16 EUR\n",
        maintype="text",
        subtype="csv",
        filename="prices.csv",
    )
    docx_bytes = write_docx(tmp / "handbook.docx").read_bytes()
    message.add_attachment(
        docx_bytes,
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="handbook.docx",
    )
    inner = mail_message(
        "Re: depot hours", "The Porto depot opens at 7:30.", msgid="<hours@example.com>"
    )
    message.add_attachment(inner)
    message.add_attachment(
        b"\x89PNG\r\n\x1a\n",
        maintype="image",
        subtype="png",
        filename="logo.png",
        disposition="inline",
    )
    message.add_attachment(
        b"%PDF-1.4 broken", maintype="application", subtype="pdf", filename="scan.pdf"
    )
    path.write_bytes(message.as_bytes(policy=email.policy.SMTP))
    return path


def write_mbox(path: Path) -> Path:
    import mailbox

    box = mailbox.mbox(path)
    for subject, body, msgid in (
        ("Holiday rota", "Marta covers the help desk on 24 December.", "<rota@example.com>"),
        ("Parking", "The car park is closed for resurfacing next week.", "<parking@example.com>"),
        ("Parking", "Correction: the car park closes the week after.", "<parking@example.com>"),
    ):
        box.add(mail_message(subject, body, msgid=msgid))
    box.flush()
    box.close()
    return path


# -- scans: text rendered to pixels, for OCR ---------------------------------------------------

LEASE = [
    "Lease agreement between Harbour Estates and Mara Lopes.",
    "The monthly rent is 1,250 EUR, due on the first day.",
    "The deposit of 2,500 EUR is returned within 30 days.",
]


def scan_image(lines: list[str], size: tuple[int, int] = (1700, 1100)) -> Any:
    """A white page with ``lines`` in black, as a scanner would give it (a PIL image)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=40)
    for k, line in enumerate(lines):
        draw.text((100, 100 + 70 * k), line, fill="black", font=font)
    return image


def write_scanned_pdf(path: Path, pages: list[list[str] | str]) -> Path:
    """A PDF whose pages are images of text (no text layer), or text (a str: a real layer)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    width, height = A4
    for page in pages:
        if isinstance(page, str):
            pdf.drawString(72, height - 72, page)
        else:
            pdf.drawImage(
                ImageReader(scan_image(page)), 36, height - 500, width=width - 72, height=420
            )
        pdf.showPage()
    pdf.save()
    return path
