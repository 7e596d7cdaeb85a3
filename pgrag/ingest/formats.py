"""The formats pgrag reads: which one a file is (from its content first), and its text.

- Markdown and plain text are read as they are.
- HTML becomes Markdown-shaped text with BeautifulSoup: headings stay headings (so they become
  the section path), list items and table rows stay one per line, and navigation, headers,
  footers, sidebars, scripts and forms are dropped.
- PDF becomes one text per page with pypdf, so each chunk knows its page; a table's row stays
  on one line.
- JSON Lines is one document per line, with configurable text, title, id and metadata fields;
  it is read line by line, never whole.

Every problem is an :class:`InputError` with a one-line reason; the caller names the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pgrag.errors import InputError

# Suffixes a directory walk picks up, and what each usually holds. The content decides: a
# .txt file holding HTML is read as HTML, a .html file holding a PDF as a PDF.
SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
SNIFF_BYTES = 8192

_HTML_START = re.compile(r"^(?:<\?xml[^>]*>\s*)?<(?:!doctype\s+html|html)\b")
_HTML_TAGS = re.compile(r"<(?:head|body|title|meta|div|p|h[1-6]|table|ul|article)\b[^>]*>", re.I)
_MD_HINTS = re.compile(r"^(?:#{1,6}\s+\S|```|~~~|\s*[-*+]\s+\S.*\n\s*[-*+]\s+\S)", re.M)


def sniff(head: bytes, suffix: str) -> str:
    """The format of a file from its first bytes; the suffix only breaks ties between text
    formats that content cannot tell apart (Markdown and plain text)."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:5] == b"%PDF-":
        return "pdf"
    if suffix == ".pdf":
        raise InputError("is named .pdf but does not start like a PDF (%PDF-); corrupt or misnamed")
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    lower = text[:4096].lower()
    known = SUFFIXES.get(suffix)
    if _HTML_START.match(_skip_comments(lower)):
        return "html"
    # Markdown often holds some HTML; only a file of no known kind is judged by its tags.
    if known is None and len(_HTML_TAGS.findall(lower)) >= 2:
        return "html"
    if known == "html":
        return "html"
    first, newline, _ = text.partition("\n")
    if known == "jsonl" or (
        known not in ("markdown", "text") and newline and _json_object(first.strip())
    ):
        return "jsonl"
    if known in ("markdown", "text"):
        return known
    return "markdown" if _MD_HINTS.search(text) else "text"


def _skip_comments(text: str) -> str:
    """The text after any leading HTML comments (in linear time: a regex with a repeated
    lazy group here took exponential time on a run of comments)."""
    while text.startswith("<!--"):
        end = text.find("-->", 4)
        if end < 0:
            return ""
        text = text[end + 3 :].lstrip()
    return text


def _json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


# --- HTML ----------------------------------------------------------------------------------

_DROP_TAGS = (
    "script", "style", "noscript", "template", "nav", "aside", "form", "button", "iframe",
    "svg", "canvas", "select", "input", "textarea", "menu", "dialog", "object", "embed",
)  # fmt: skip
_DROP_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary", "menu",
               "menubar", "dialog", "alert", "toolbar"}  # fmt: skip
_BOILERPLATE = re.compile(
    r"(?:^|[-_\s])(?:nav|navbar|navigation|menu|sidebar|breadcrumbs?|footer|cookies?|"
    r"cookie-banner|skip-link|share|social|advert|ads|promo|newsletter|toc)(?:$|[-_\s])",
    re.I,
)
_BLOCKS = {
    "p", "div", "section", "article", "main", "body", "blockquote", "figure", "figcaption",
    "address", "details", "summary", "dl", "dt", "dd", "header", "footer", "center", "html",
}  # fmt: skip
_WS = re.compile(r"\s+")


def html_to_markdown(html: str) -> tuple[str, str | None]:
    """(Markdown-shaped text, the page's title) of an HTML document, boilerplate dropped."""
    from bs4 import BeautifulSoup, Comment, Doctype, ProcessingInstruction, Tag

    soup = BeautifulSoup(html, "lxml")
    title_tag = soup.find("title")
    title = _WS.sub(" ", title_tag.get_text()).strip() if title_tag else None
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    # A wrapper is never boilerplate, whatever its class says ("layout has-sidebar",
    # "toc-enabled"): an element holding over 40% of the page's text stays.
    # (Text lengths counted once, bottom up, so that deep pages stay linear.)
    size: dict[int, int] = {}
    for piece in soup.find_all(string=True):
        n = len(_WS.sub("", str(piece)))
        if n:
            for parent in piece.parents:
                size[id(parent)] = size.get(id(parent), 0) + n
    total = size.get(id(soup), 0)
    for tag in soup.find_all(True):
        if tag.decomposed or not isinstance(tag.attrs, dict):
            continue
        if total and size.get(id(tag), 0) > 0.4 * total:
            continue
        role = str(tag.get("role") or "").lower()
        names = " ".join([str(tag.get("id") or ""), *(tag.get("class") or [])])
        hidden = tag.get("aria-hidden") == "true" or tag.has_attr("hidden")
        # A page's own header and footer go; an article's or a section's header stays.
        site_part = (
            tag.name in ("header", "footer")
            and tag.find_parent(["article", "main", "section"]) is None
        )
        if (
            role in _DROP_ROLES
            or hidden
            or site_part
            or (
                tag.name in ("div", "section", "ul", "ol", "span", "p")
                and _BOILERPLATE.search(names)
            )
        ):
            tag.decompose()
    main = soup.find("main")
    articles = soup.find_all("article")
    root: Tag | None = main if isinstance(main, Tag) else None
    if root is None and len(articles) == 1 and isinstance(articles[0], Tag):
        root = articles[0]
    if root is None:
        body = soup.find("body")
        root = body if isinstance(body, Tag) else soup

    def inline(node: Any) -> str:
        return _WS.sub(" ", node.get_text(" ")).strip()

    def render(node: Any) -> str:
        if isinstance(node, (Comment, Doctype, ProcessingInstruction)):
            return ""
        if not isinstance(node, Tag):
            return _WS.sub(" ", str(node))
        name = node.name
        if name in ("h1", "h2", "h3", "h4", "h5", "h6"):
            text = inline(node)
            # (\x01 marks the headings made here; see below)
            return f"\n\n\x01{'#' * int(name[1])} {text}\n\n" if text else ""
        if name in ("ul", "ol"):
            lines = []
            for i, li in enumerate(node.find_all("li", recursive=False), start=1):
                text = _WS.sub(" ", "".join(render(c) for c in li.children)).strip()
                if text:
                    lines.append(f"{i}. {text}" if name == "ol" else f"- {text}")
            return "\n\n" + "\n".join(lines) + "\n\n" if lines else ""
        if name == "table":
            rows = []
            for tr in node.find_all("tr"):
                cells = [inline(c).replace("|", "/") for c in tr.find_all(["td", "th"])]
                if any(cells):
                    rows.append("| " + " | ".join(cells) + " |")
            return "\n\n" + "\n".join(rows) + "\n\n" if rows else ""
        if name == "pre":
            code = node.get_text().strip("\n")
            return f"\n\n```\n{code}\n```\n\n" if code.strip() else ""
        if name == "br":
            return "\n"
        if name == "hr":
            return "\n\n"
        inner = "".join(render(c) for c in node.children)
        if name in _BLOCKS or name == "li":
            return f"\n\n{inner}\n\n"
        return inner

    try:
        rendered = render(root)
    except RecursionError as err:
        raise InputError("is HTML nested too deeply to read (over ~900 levels)") from err
    out = []
    fence = False
    for line in rendered.replace("\x01", "\n\x01").split("\n"):
        line = line.strip() if not fence else line.rstrip()
        if line.startswith("```"):
            fence = not fence
        elif line.startswith("\x01"):
            line = line[1:]
        elif not fence and line.startswith("#"):
            line = "\\" + line  # a paragraph starting with '#' is not a heading
        out.append(line)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    if title is None:
        h1 = soup.find("h1")
        title = inline(h1) if h1 else None
    return text, title or None


# --- PDF -----------------------------------------------------------------------------------


def pdf_pages(stream: IO[bytes]) -> tuple[list[str], str | None]:
    """(text of each page, the document's title) of a PDF, read from an open file: pypdf
    reads the objects it needs from it, not the whole file into memory."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(stream)
        if reader.is_encrypted and not reader.decrypt(""):
            raise InputError("is an encrypted PDF; decrypt it first (e.g. `qpdf --decrypt`)")
        pages = [_page_text(page) for page in reader.pages]
        meta = reader.metadata
        title = str(meta.title).replace("\x00", "").strip() if meta and meta.title else None
    except InputError:
        raise
    except PdfReadError as err:
        raise InputError(f"cannot be read as a PDF ({_one_line(err)}); it may be corrupt") from err
    except Exception as err:  # pypdf raises many types on malformed files
        raise InputError(
            f"cannot be read as a PDF ({type(err).__name__}: {_one_line(err)}); it may be corrupt"
        ) from err
    if not any(p.strip() for p in pages):
        raise InputError("has no text layer (a scanned PDF?); run OCR on it first")
    return pages, title


_COLUMN_GAP = re.compile(r" {4,}")


def _page_text(page: Any) -> str:
    """A page's text in reading order, a table row per line as ``| a | b |`` (pypdf's layout
    mode keeps a row's cells on one line, columns apart; plain mode gives one cell a line)."""
    try:
        raw = page.extract_text(extraction_mode="layout") or ""
    except Exception:  # layout mode is the fussier one; plain text is still worth having
        raw = page.extract_text() or ""
    lines = []
    for line in raw.replace("\x00", "").splitlines():
        line = line.strip()
        if _COLUMN_GAP.search(line):
            line = "| " + " | ".join(_COLUMN_GAP.split(line)) + " |"
        else:
            line = re.sub(r" {2,}", " ", line)
        if line.startswith("#"):
            line = "\\" + line  # chunked as Markdown (for the rows): never a heading
        lines.append(line)
    return "\n".join(lines).strip()


def _one_line(err: BaseException) -> str:
    return _WS.sub(" ", str(err)).strip()[:200] or type(err).__name__


# --- JSON Lines ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonlFields:
    """Which fields of a JSON Lines record are what. ``id`` None: ``_id`` or ``id`` when the
    record has one, else the line number (an id keeps a record's identity when lines move).
    ``metadata`` None: every other field."""

    text: str = "text"
    title: str | None = "title"
    id: str | None = None
    metadata: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Record:
    line: int
    key: str
    title: str | None
    text: str
    metadata: dict[str, Any]


MAX_LINE_BYTES = 16 * 1024 * 1024


def jsonl_records(
    stream: IO[bytes], fields: JsonlFields
) -> Iterator[Record | tuple[int, InputError]]:
    """Each line's record, or (line number, the problem with that line); one line at a time."""
    seen: dict[str, int] = {}
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"is {len(raw)} bytes, over the {MAX_LINE_BYTES}-byte line limit")
            try:
                record = json.loads(raw)
            except ValueError as err:
                raise InputError(f"is not valid JSON ({_one_line(err)})") from err
            if not isinstance(record, dict):
                raise InputError("is not a JSON object")
            text = record.get(fields.text)
            if not isinstance(text, str) or not text.strip():
                raise InputError(
                    f"has no text in field {fields.text!r}; name the field with --jsonl-text"
                )
            id_field = fields.id or next((f for f in ("_id", "id") if f in record), None)
            if id_field is not None and record.get(id_field) in (None, ""):
                raise InputError(f"has no {id_field!r}; every record needs one, or none does")
            key = str(record[id_field]) if id_field else f"line-{number}"
            if key in seen:
                raise InputError(f"repeats id {key!r} of line {seen[key]}")
            seen[key] = number
            title = record.get(fields.title) if fields.title else None
            used = {fields.text, fields.title, id_field}
            names = fields.metadata if fields.metadata is not None else tuple(record)
            metadata = {n: record[n] for n in names if n in record and n not in used}
            yield Record(number, key, title if isinstance(title, str) else None, text, metadata)
        except InputError as err:
            yield number, err


def read_head(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(SNIFF_BYTES)
