"""PowerPoint presentations (PPTX), read with python-pptx (the ``office`` extra): each slide is
a section headed "Slide N: its title" (so each chunk's section path names its slide), holding
its text in the order of its shapes (grouped shapes included), a bullet per line, each table
as a Markdown table with its header row, and the speaker notes after "Notes:". The title is
the presentation's core property, else the first slide's title, else the file name. Images,
charts and SmartArt are not read. A PowerPoint 97-2003 .ppt is refused with a line saying to
convert it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample

NAME = "pptx"
LABEL = "PowerPoint (PPTX)"
SUFFIXES = (".pptx", ".pptm", ".ppsx", ".ppsm", ".potx", ".potm")  # (macros are not run)
ORDER = 52
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def detect(sample: Sample) -> bool:
    """A ZIP archive holding ppt/presentation.xml, whatever its name; a file named .pptx that is
    not is refused (an older binary file with a line saying to convert it), unless it is
    another office file, which its own module reads."""
    return _office.claims(sample, NAME, _OLE2, "a PowerPoint 97-2003 file (.ppt)")


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "PowerPoint", xml_limit=True)
    pptx = _office.library("pptx", "PowerPoint (PPTX)", "python-pptx")
    with _office.reading("a PowerPoint presentation"):
        # (the package, not pptx.Presentation(), which refuses a slide show or a template)
        deck = _presentation(pptx, fh)
        text, title = _markdown(deck)
    slides = len(deck.slides)
    yield str(path), _office.loaded(path, fh, NAME, text, title, {"slides": slides})


def _presentation(pptx: Any, fh: BinaryIO) -> Any:
    from pptx.package import Package
    from pptx.parts.presentation import PresentationPart

    part = Package.open(fh).main_document_part
    if not isinstance(part, PresentationPart):
        raise InputError(f"is not a PowerPoint presentation (its main part is {part.content_type})")
    return part.presentation


def _markdown(deck: Any) -> tuple[str, str | None]:
    title = (deck.core_properties.title or "").strip() or None
    blocks = _office.Text()
    for number, slide in enumerate(deck.slides, 1):
        budget.check("reading the presentation's slides")
        heading_shape = slide.shapes.title
        name = heading_shape.text_frame.text.strip() if heading_shape is not None else ""
        title = title or name or None
        body: list[str] = []
        for shape in slide.shapes:
            if heading_shape is not None and shape.shape_id == heading_shape.shape_id:
                continue
            body.extend(_shape_text(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                body.append("Notes: " + " ".join(notes.text.split()))
        heading = f"Slide {number}: {' '.join(name.split())}" if name else f"Slide {number}"
        blocks.add(_office.heading(1, heading) + ("\n\n" + "\n\n".join(body) if body else ""))
    return blocks.joined(), title


def _shape_text(shape: Any) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [t for child in shape.shapes for t in _shape_text(child)]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = _office.markdown_table([c.text for c in row.cells] for row in shape.table.rows)
        return ["\n".join(rows)] if rows else []
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for paragraph in shape.text_frame.paragraphs:
            text = " ".join(paragraph.text.split())
            if text:
                lines.append(("  " * paragraph.level) + "- " + text)  # (never a heading)
        return ["\n".join(lines)] if lines else []
    return []
