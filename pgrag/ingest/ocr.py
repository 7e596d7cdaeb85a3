"""OCR for scans: Tesseract, the operating system's package (`apt-get install tesseract-ocr`),
run as a program on each page, and PDF pages rendered by pypdfium2: the ``ocr`` extra,
`pip install 'pgrag[ocr]'`. Optional: without it a PDF page with no text layer is left
empty (a PDF of only such pages is refused with a line saying so), and an image is skipped.

``PGRAG_OCR_LANG`` names Tesseract's languages (default ``eng``; ``eng+deu`` for two, each
installed as tesseract-ocr-LANG). Pages are rendered at 300 dots per inch. Tesseract runs
with one thread a page (OMP_THREAD_LIMIT=1 in its environment only): its threads fight over
a small machine's cores (one page took 9.6 s with them, 1.7 s without, on 2 shared cores),
and pgrag's parallelism is its files and requests."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from functools import cache
from typing import Any

from pgrag.errors import InputError

DPI = 300
MAX_PIXELS = 120_000_000  # an image larger than this (a decompression bomb) is refused
PAGE_PIXELS = 40_000_000  # a PDF page larger than this at DPI is rendered smaller
PAGE_SECONDS = 120  # Tesseract is stopped on a page that takes longer
HINT = "pip install 'pgrag[ocr]' and Tesseract (apt-get install tesseract-ocr)"


@cache
def missing() -> str | None:
    """Why OCR cannot run here (what is missing), or None when it can."""
    try:
        import PIL  # noqa: F401
        import pypdfium2  # noqa: F401
    except ImportError as err:
        return f"the ocr extra is not installed ({err.name}): {HINT}"
    program = shutil.which("tesseract")
    if program is None:
        return f"the tesseract program is not installed: {HINT}"
    try:
        subprocess.run([program, "--version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return f"the tesseract program at {program} does not run: {HINT}"
    return None


def language() -> str:
    return (os.environ.get("PGRAG_OCR_LANG") or "eng").strip() or "eng"


def image_text(image: Any) -> str:
    """The text Tesseract reads in a PIL image."""
    program = shutil.which("tesseract")
    if program is None:
        raise InputError(f"needs OCR, and the tesseract program is not installed: {HINT}")
    png = io.BytesIO()
    image.convert("L").save(png, format="PNG")
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        done = subprocess.run(
            [program, "stdin", "stdout", "-l", language()],
            input=png.getvalue(),
            capture_output=True,
            timeout=PAGE_SECONDS,
            env=env,
        )
    except subprocess.TimeoutExpired as err:
        raise InputError(f"has a page OCR could not read in {PAGE_SECONDS} s") from err
    if done.returncode != 0:
        reason = " ".join(done.stderr.decode("utf-8", errors="replace").split())[:200]
        raise InputError(f"could not be read by OCR (tesseract: {reason or done.returncode})")
    text = done.stdout.decode("utf-8", errors="replace")
    return "\n".join(line.rstrip() for line in text.replace("\x0c", "").splitlines()).strip()


def pdf_page_text(document: Any, index: int) -> str:
    """The text Tesseract reads on page ``index`` of a pypdfium2 document, rendered at DPI, or
    smaller for a page that would be over PAGE_PIXELS (a page can claim any size)."""
    page = document[index]
    try:
        width, height = page.get_size()  # (in points, 1/72 inch)
        scale = DPI / 72
        area = max(width * height, 1.0)
        if area * scale * scale > PAGE_PIXELS:
            scale = (PAGE_PIXELS / area) ** 0.5
        image = page.render(scale=scale).to_pil()
    finally:
        page.close()
    return image_text(image)
