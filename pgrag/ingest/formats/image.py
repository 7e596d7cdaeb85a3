"""Images (PNG, JPEG, TIFF, WebP), read by OCR (pgrag.ingest.ocr, the ``ocr`` extra): a scanned
page, or a multi-page TIFF a page per frame, each chunk recording its page as a PDF's do.

A directory walk does not pick images up (a folder of documents often holds diagrams and
screenshots that are not meant to be documents): an image is read when it is named itself,
`pgrag ingest scans/*.png`, its kind decided by its content. Without OCR installed, or when OCR
finds no text in it, it is skipped with a warning, not failed. An image over 120 million
pixels is refused."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError, SkippedInput
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile, file_metadata, name_title, source_of
from pgrag.ingest.formats._base import Sample, one_line

NAME = "image"
LABEL = "image (by OCR)"
SUFFIXES: tuple[str, ...] = ()  # (named files only: see above)
ORDER = 40
BINARY = True

_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")


def detect(sample: Sample) -> bool:
    head = sample.head
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    from pgrag.ingest import ocr

    why = ocr.missing()
    if why is not None:
        raise SkippedInput(f"an image, read only by OCR, and {why}")
    from PIL import Image, ImageSequence, UnidentifiedImageError

    digest = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    fh.seek(0)
    pages: list[str] = []
    with budget.file_budget(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Pillow warns of large images: the limit is ours)
        try:
            with Image.open(fh) as image:
                for frame in ImageSequence.Iterator(image):
                    width, height = frame.size
                    if width * height > ocr.MAX_PIXELS:
                        raise InputError(
                            f"is an image of {width}x{height} pixels, over the"
                            f" {ocr.MAX_PIXELS}-pixel limit for OCR; scale it down"
                        )
                    budget.check("reading the image by OCR")
                    pages.append(ocr.image_text(frame))
        except (InputError, SkippedInput):
            raise
        except UnidentifiedImageError as err:
            raise InputError(
                "cannot be read as an image (damaged, or of a kind Pillow does not read)"
            ) from err
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise InputError(f"cannot be read as an image ({one_line(err)})") from err
    if not any(p.strip() for p in pages):
        raise SkippedInput("an image in which OCR found no text")
    st = path.stat()
    yield (
        str(path),
        LoadedFile(
            label=str(path),
            source=source_of(path),
            format=NAME,
            text="\n\n".join(pages),
            title=name_title(path),
            content_hash=digest.hexdigest(),
            metadata={**file_metadata(path, NAME, st.st_size, st.st_mtime), "pages": len(pages)},
            pages=tuple(pages),
        ),
    )
