"""HTML: turned into Markdown-shaped text with BeautifulSoup. Headings stay headings (so they
become the section path), list items and table rows stay one per line, and navigation,
headers, footers, sidebars, scripts and forms are dropped. Read whole, so it has a size limit."""

from __future__ import annotations

import re
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.formats._base import Sample

NAME = "html"
LABEL = "HTML"
SUFFIXES = (".html", ".htm", ".xhtml")
ORDER = 200
MARKDOWN = True

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
