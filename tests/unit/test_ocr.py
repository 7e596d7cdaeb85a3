"""OCR (pgrag.ingest.ocr): scanned PDF pages and images read by Tesseract, from pages rendered
from known text; without OCR, today's clear line (PDF) or a skip (image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag.errors import InputError, SkippedInput
from pgrag.ingest import ocr
from pgrag.ingest.loaders import LoadedFile, load_path
from tests.samples import LEASE, scan_image, write_scanned_pdf


def test_ocr_is_installed_for_these_tests() -> None:
    # (scripts/test installs Tesseract, scripts/setup-ocr; the extra is in test's extras)
    assert ocr.missing() is None


def _one(path: Path) -> LoadedFile | InputError:
    [(label, item)] = list(load_path(path))
    assert label == str(path)
    return item


def test_a_scanned_pdf_is_read_by_ocr(tmp_path: Path) -> None:
    path = write_scanned_pdf(tmp_path / "lease.pdf", [LEASE, "Page two has a text layer."])
    doc = _one(path)
    assert isinstance(doc, LoadedFile), doc
    assert doc.pages is not None and len(doc.pages) == 2
    assert doc.metadata["ocr_pages"] == [1]  # page 2 had its own text
    for line in LEASE:
        assert line in doc.pages[0]
    assert doc.pages[1] == "Page two has a text layer."


def test_an_image_is_read_by_ocr_a_tiff_a_page_per_frame(tmp_path: Path) -> None:
    png = tmp_path / "scan.png"
    scan_image(LEASE).save(png)
    doc = _one(png)
    assert isinstance(doc, LoadedFile) and doc.format == "image"
    assert "The monthly rent is 1,250 EUR, due on the first day." in doc.text
    tiff = tmp_path / "scan.tif"
    first, second = scan_image(LEASE[:1]), scan_image(["Signed in Porto on 3 March 2026."])
    first.save(tiff, save_all=True, append_images=[second])
    doc = _one(tiff)
    assert isinstance(doc, LoadedFile) and doc.pages is not None and len(doc.pages) == 2
    assert doc.pages[1] == "Signed in Porto on 3 March 2026."


def test_an_image_without_text_is_skipped_not_failed(tmp_path: Path) -> None:
    blank = tmp_path / "logo.png"
    scan_image([]).save(blank)
    item = _one(blank)
    assert isinstance(item, SkippedInput) and "OCR found no text" in str(item)


def test_without_ocr_a_scan_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ocr, "missing", lambda: "the ocr extra is not installed (pytesseract): ...")
    scanned = write_scanned_pdf(tmp_path / "lease.pdf", [LEASE])
    item = _one(scanned)
    assert isinstance(item, InputError) and not isinstance(item, SkippedInput)
    assert str(item) == (
        "has no text layer (a scanned PDF?); to read it by OCR, pip install 'pgrag[ocr]' and"
        " Tesseract (apt-get install tesseract-ocr)"
    )
    mixed = _one(write_scanned_pdf(tmp_path / "mixed.pdf", [LEASE, "Text on page two."]))
    assert isinstance(mixed, LoadedFile) and mixed.pages == ("", "Text on page two.")
    png = tmp_path / "scan.png"
    scan_image(LEASE).save(png)
    item = _one(png)
    assert isinstance(item, SkippedInput) and "read only by OCR" in str(item)


def test_a_huge_image_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ocr, "MAX_PIXELS", 1000)
    png = tmp_path / "big.png"
    scan_image(["x"], size=(100, 100)).save(png)
    item = _one(png)
    assert isinstance(item, InputError) and "over the 1000-pixel limit" in str(item)
