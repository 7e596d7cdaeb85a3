"""HTML: turned into Markdown-shaped text with BeautifulSoup. Headings stay headings (so they
become the section path), list items and table rows stay one per line, and navigation,
headers, footers, sidebars, scripts and forms are dropped. Read whole, so it has a size limit."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.formats._base import Sample

NAME = "html"
LABEL = "HTML"
SUFFIXES = (".html", ".htm", ".xhtml")
ORDER = 200
MARKDOWN = True
# No nesting limit: the tree is walked with a stack of its own, in time linear in its size.

_HTML_START = re.compile(r"^(?:<\?xml[^>]*>\s*)?<(?:!doctype\s+html|html)\b")
_HTML_TAGS = re.compile(r"<(?:head|body|title|meta|div|p|h[1-6]|table|ul|article)\b[^>]*>", re.I)


def detect(sample: Sample) -> bool:
    """A file that starts like an HTML document, whatever its name; one of no known kind with
    HTML tags (Markdown often holds some HTML: only a file of no known kind is judged by its
    tags); or one named .html."""
    lower = sample.lower
    if _HTML_START.match(_skip_comments(lower)):
        return True
    if sample.known is None and len(_HTML_TAGS.findall(lower)) >= 2:
        return True
    return sample.known == NAME


def convert(text: str) -> tuple[str, str | None]:
    text, title = html_to_markdown(text)
    if not text.strip():
        raise InputError("has no text once navigation and markup are removed")
    return text, title


def _skip_comments(text: str) -> str:
    """The text after any leading HTML comments (in linear time: a regex with a repeated
    lazy group here took exponential time on a run of comments)."""
    while text.startswith("<!--"):
        end = text.find("-->", 4)
        if end < 0:
            return ""
        text = text[end + 3 :].lstrip()
    return text


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
    """(Markdown-shaped text, the page's title) of an HTML document, boilerplate dropped.

    Linear in the size of the page whatever its depth: every pass below is a loop over the
    tree with a stack of its own (no recursion, so no depth limit either), and each node is
    visited a bounded number of times. Long loops check the file's budget
    (:func:`pgrag.ingest.budget.check`)."""
    from bs4 import BeautifulSoup

    from pgrag.ingest import budget

    soup = BeautifulSoup(html, "lxml", huge_tree=True)
    title_tag = soup.find("title")
    title = _WS.sub(" ", title_tag.get_text()).strip() if title_tag else None
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    budget.check("parsing HTML")
    _drop_boilerplate(soup)
    main = soup.find("main")
    articles = soup.find_all("article")
    root: Any = main if main is not None else None
    if root is None and len(articles) == 1:
        root = articles[0]
    if root is None:
        body = soup.find("body")
        root = body if body is not None else soup
    rendered = _render(root)
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
        title = _inline(h1) if h1 else None
    return text, title or None


def _inline(node: Any) -> str:
    return _WS.sub(" ", node.get_text(" ")).strip()


def _tags_in_order(root: Any) -> list[tuple[Any, int, bool]]:
    """Every tag under ``root`` (itself included) in document order, with the index of its
    parent in this list (-1 for the root) and whether an article, main or section encloses
    it; without recursion."""
    from bs4 import Tag

    found: list[tuple[Any, int, bool]] = []
    stack: list[tuple[Any, int, bool]] = [(root, -1, False)]
    while stack:
        node, parent, enclosed = stack.pop()
        index = len(found)
        found.append((node, parent, enclosed))
        inside = enclosed or node.name in ("article", "main", "section")
        stack.extend(
            (child, index, inside) for child in reversed(node.contents) if isinstance(child, Tag)
        )
    return found


def _drop_boilerplate(soup: Any) -> None:
    """Drop navigation, banners, hidden parts and the page's own header and footer.

    A wrapper is never boilerplate, whatever its class says ("layout has-sidebar",
    "toc-enabled"): an element holding over 40% of the page's text stays. Text lengths are
    summed bottom up over one list of the tags, so deep pages stay linear."""
    from bs4.element import NavigableString

    from pgrag.ingest import budget

    tags = _tags_in_order(soup)
    size = [0] * len(tags)
    for i, (tag, _, _) in enumerate(tags):
        for child in tag.contents:
            if isinstance(child, NavigableString):
                size[i] += len(_WS.sub("", str(child)))
    for i in range(len(tags) - 1, 0, -1):  # children come after their parents
        size[tags[i][1]] += size[i]
        if not i % 20000:
            budget.check("reading HTML")
    total = size[0]
    dropped = [False] * len(tags)
    for i, (tag, parent, enclosed) in enumerate(tags):
        if i == 0 or dropped[parent]:
            dropped[i] = i > 0 and dropped[parent]
            continue
        if total and size[i] > 0.4 * total:
            continue
        role = str(tag.get("role") or "").lower()
        names = " ".join([str(tag.get("id") or ""), *(tag.get("class") or [])])
        hidden = tag.get("aria-hidden") == "true" or tag.has_attr("hidden")
        # A page's own header and footer go; an article's or a section's header stays.
        site_part = tag.name in ("header", "footer") and not enclosed
        if (
            role in _DROP_ROLES
            or hidden
            or site_part
            or (
                tag.name in ("div", "section", "ul", "ol", "span", "p")
                and _BOILERPLATE.search(names)
            )
        ):
            dropped[i] = True
    for i, (tag, parent, _) in enumerate(tags):
        if dropped[i] and not dropped[parent]:
            tag.decompose()


class _Out:
    """The rendered text as a list of pieces. Inside a list item or a table cell the text is
    "inline": block breaks become spaces, and only the outermost item collapses its text, once
    (so nested items cost no more than flat ones)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.items: list[int] = []  # where each open list item or cell starts in pieces
        self.rows: list[int] = []  # where each open table row starts

    @property
    def inline(self) -> bool:
        return bool(self.items)

    def text(self, piece: str) -> None:
        self.pieces.append(piece)

    def block(self, piece: str) -> None:
        self.pieces.append(" " if self.items else piece)

    def open_item(self) -> None:
        self.items.append(len(self.pieces))
        self.pieces.append("")  # the marker of a nested item goes here

    def close_item(self, marker: str, cell: bool) -> None:
        """The outermost item becomes one line (an empty list item disappears; a cell's '|'
        becomes '/'); a nested one only gets its marker, as text."""
        start = self.items.pop()
        if self.items:
            self.pieces[start] = f" {marker}"
            return
        text = _WS.sub(" ", "".join(self.pieces[start + 1 :])).strip()
        del self.pieces[start:]
        if cell:
            self.pieces.append("\x03" + text.replace("|", "/"))
        elif text:
            self.pieces.append(f"{marker}{text}\n")

    def open_row(self) -> None:
        self.rows.append(len(self.pieces))

    def close_row(self, header: bool = False) -> None:
        """A row of cells on one line; a header row (of ``th`` cells only) with the Markdown
        delimiter row under it, so that the chunker repeats it in each chunk of the table."""
        start = self.rows.pop()
        cells = [p[1:] for p in self.pieces[start:] if p.startswith("\x03")]
        del self.pieces[start:]
        if any(cells):
            self.pieces.append("| " + " | ".join(cells) + " |\n")
            if header:
                self.pieces.append("|" + " --- |" * len(cells) + "\n")


def _render(root: Any) -> str:
    """The Markdown-shaped text of ``root``'s subtree, by an explicit stack: an entry is a node
    to open, or a function to call when the node's children are done."""
    from bs4 import Comment, Doctype, ProcessingInstruction, Tag
    from bs4.element import NavigableString, PageElement

    from pgrag.ingest import budget

    out = _Out()
    stack: list[Any] = [root]
    steps = 0
    while stack:
        item = stack.pop()
        if not isinstance(item, PageElement):  # a node's children are done
            item()
            continue
        steps += 1
        if not steps % 20000:
            budget.check("converting HTML")
        node = item
        if isinstance(node, (Comment, Doctype, ProcessingInstruction)):
            continue
        if not isinstance(node, Tag):
            if isinstance(node, NavigableString):
                out.text(_WS.sub(" ", str(node)))
            continue
        name = node.name
        if name in ("h1", "h2", "h3", "h4", "h5", "h6"):
            text = _inline(node)
            if text and out.inline:
                out.text(f" {text} ")
            elif text:  # (\x01 marks the headings made here; see html_to_markdown)
                out.text(f"\n\n\x01{'#' * int(name[1])} {text}\n\n")
            continue
        if name == "pre":
            code = node.get_text().strip("\n")
            if code.strip() and out.inline:
                out.text(f" {code} ")
            elif code.strip():
                out.text(f"\n\n```\n{code}\n```\n\n")
            continue
        if name == "br":
            out.block("\n")
            continue
        if name == "hr":
            out.block("\n\n")
            continue
        if name in ("ul", "ol"):
            items = [c for c in node.contents if isinstance(c, Tag) and c.name == "li"]
            out.block("\n\n")
            stack.append(partial(out.block, "\n\n"))
            for number, li in reversed(list(enumerate(items, start=1))):
                marker = f"{number}. " if name == "ol" else "- "
                stack.append(partial(out.close_item, marker, False))
                stack.extend(reversed(li.contents))
                stack.append(out.open_item)
            continue
        if name == "tr" and not out.inline:
            cells = [c for c in node.contents if isinstance(c, Tag) and c.name in ("td", "th")]
            stack.append(partial(out.close_row, bool(cells) and all(c.name == "th" for c in cells)))
            for cell in reversed(cells):
                stack.append(partial(out.close_item, "", True))
                stack.extend(reversed(cell.contents))
                stack.append(out.open_item)
            stack.append(out.open_row)
            continue
        if name in _BLOCKS or name in ("li", "table", "td", "th", "tr"):
            out.block("\n\n")
            stack.append(partial(out.block, "\n\n"))
        stack.extend(reversed(node.contents))
    return "".join(out.pieces)
