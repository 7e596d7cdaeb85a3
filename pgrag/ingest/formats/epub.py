"""E-books (EPUB 2 and 3): the ZIP archive's META-INF/container.xml names the package (OPF)
file, whose spine lists the chapters in reading order; each chapter is turned into Markdown as
an HTML page is (headings kept, navigation dropped), under a top-level heading of its own
unless it opens with one (its page title, else "Chapter N"), so every chunk's section path
names its chapter. The title is the book's (Dublin Core title), else the file name; its
authors and language are kept in the metadata. Images are not read; a DRM-encrypted book's
chapters do not parse, and it is refused.

No e-book library: EbookLib, the one kept for Python, is AGPL-3.0 (pgrag is Apache-2.0), and
reading the spine is two small XML files with lxml (entities and network off)."""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample

NAME = "epub"
LABEL = "EPUB"
SUFFIXES = (".epub",)
ORDER = 53
BINARY = True

_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}
_HTML_TYPES = {"application/xhtml+xml", "text/html"}


def detect(sample: Sample) -> bool:
    """A ZIP archive with META-INF/container.xml and a package (.opf) file, whatever its name;
    a file named .epub that is not is refused, unless it is an office file."""
    return _office.claims(sample, NAME)


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "EPUB")
    with _office.reading("an EPUB book"), zipfile.ZipFile(fh) as archive:
        text, title, extra = _book(archive)
    loaded = _office.loaded(path, fh, NAME, text, title, extra)
    missing = extra.get("missing_chapters")
    if isinstance(missing, list) and missing:
        note = f"read without {len(missing)} chapter(s) its spine names but the book lacks"
        loaded = replace(loaded, notes=(f"{note} ({', '.join(missing[:3])})",))
    yield str(path), loaded


def _book(archive: zipfile.ZipFile) -> tuple[str, str | None, dict[str, object]]:
    from lxml import etree

    from pgrag.ingest.formats.html import html_to_markdown

    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    container = etree.fromstring(archive.read("META-INF/container.xml"), parser)
    found = container.xpath("//c:rootfile/@full-path", namespaces=_NS)
    if not found:
        raise InputError("is an EPUB book without a package file named in its container.xml")
    package = str(found[0])
    opf = etree.fromstring(archive.read(package), parser)
    base = posixpath.dirname(package)
    manifest = {
        item.get("id"): (item.get("href"), item.get("media-type"), item.get("properties") or "")
        for item in opf.xpath("//opf:manifest/opf:item", namespaces=_NS)
    }
    if "META-INF/encryption.xml" in archive.namelist():
        raise InputError("is an encrypted (DRM) EPUB book; pgrag reads only books without DRM")
    blocks = _office.Text()
    done: set[str] = set()
    missing: list[str] = []
    for idref in opf.xpath("//opf:spine/opf:itemref/@idref", namespaces=_NS):
        href, kind, properties = manifest.get(idref, (None, None, ""))
        if not href or kind not in _HTML_TYPES or "nav" in properties.split() or href in done:
            continue  # (a chapter the spine lists again is read once)
        done.add(href)
        budget.check("reading the book's chapters")
        name = posixpath.normpath(posixpath.join(base, unquote(href)))
        try:
            raw = archive.read(name)
        except KeyError:  # the spine names a file the book lacks: the other chapters stand
            missing.append(href)
            continue
        text, page_title = html_to_markdown(raw.decode("utf-8", errors="replace"))
        text = text.strip()
        if not text:
            continue
        if not text.startswith("# "):  # (a chapter that opens with a subheading is under it)
            label = (page_title or "").strip() or f"Chapter {len(blocks.blocks) + 1}"
            text = _office.heading(1, label) + "\n\n" + text
        blocks.add(text)
    if not blocks:
        raise InputError("is an EPUB book with no readable chapter (encrypted, or only images?)")

    def dc(key: str) -> list[str]:
        values = opf.xpath(f"//dc:{key}/text()", namespaces=_NS)
        return [" ".join(str(v).split()) for v in values if str(v).strip()]

    extra: dict[str, object] = {"chapters": len(blocks.blocks)}
    if missing:
        extra["missing_chapters"] = missing[:20]  # (listed in the spine, absent from the file)
    if dc("creator"):
        extra["author"] = ", ".join(dc("creator"))
    if dc("language"):
        extra["language"] = dc("language")[0]
    titles = dc("title")
    return blocks.joined(), titles[0] if titles else None, extra
