"""OCR speed and character accuracy on pages rendered from known text (issue 20, item 3).

Pages of known text (paragraphs of the CMake manual installed by Debian's cmake-data, or of
this repository's docs when it is missing) are drawn in black on white with Pillow's bundled
font, at a size like 11-point type scanned at 300 dpi, then made to look scanned: turned by a
fraction of a degree, blurred a little and speckled with noise. pgrag's OCR (Tesseract, run by
pgrag.ingest.ocr) reads each; reported per setting: the character error rate
(edit distance / length, whitespace runs counted as one space) and seconds per page, beside a
clean page (no scan effects), and the same scanned page at 200 dpi (scaled by 2/3).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/ocr_eval.py --pages 10
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pgrag.ingest import ocr  # noqa: E402

WIDTH, HEIGHT = 2480, 3508  # A4 at 300 dpi
FONT_PX = 46  # about 11 pt at 300 dpi


def paragraphs() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import build_docs_set

    roots = sorted(Path("/usr/share").glob("cmake-*/Help"))
    if roots:
        return [text for _, text in build_docs_set.cmake_paragraphs(roots[-1])]
    docs = (ROOT / "docs").glob("*.md")
    return [p for d in docs for p in d.read_text().split("\n\n") if len(p.split()) > 30 and "|" not in p]


def page_text(rng: random.Random, pool: list[str]) -> str:
    lines: list[str] = []
    while len(lines) < 50:
        lines += textwrap.wrap(rng.choice(pool), width=80) + [""]
    return "\n".join(lines[:50]).strip()


def render(text: str, scanned: bool, rng: random.Random) -> Any:
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    image = Image.new("L", (WIDTH, HEIGHT), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=FONT_PX)
    for k, line in enumerate(text.split("\n")):
        draw.text((200, 200 + int(FONT_PX * 1.45) * k), line, fill=0, font=font)
    if not scanned:
        return image
    image = image.rotate(rng.uniform(-0.8, 0.8), fillcolor=255, resample=Image.Resampling.BICUBIC)
    image = image.filter(ImageFilter.GaussianBlur(1.0))
    noise = Image.effect_noise((WIDTH, HEIGHT), 24)
    return Image.blend(image, noise, 0.12)


def cer(truth: str, found: str) -> float:
    a = re.sub(r"\s+", " ", truth).strip()
    b = re.sub(r"\s+", " ", found).strip()
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1] / max(len(a), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    why = ocr.missing()
    if why is not None:
        sys.exit(f"ocr_eval: {why}")
    rng = random.Random(args.seed)
    pool = paragraphs()
    results: dict[str, dict[str, list[float]]] = {
        name: {"cer": [], "seconds": []} for name in ("clean 300 dpi", "scanned 300 dpi", "scanned 200 dpi")
    }
    lengths = []
    for n in range(args.pages):
        text = page_text(rng, pool)
        lengths.append(len(text))
        clean = render(text, False, rng)
        scanned = render(text, True, rng)
        low = scanned.resize((WIDTH * 2 // 3, HEIGHT * 2 // 3))
        for name, image in (("clean 300 dpi", clean), ("scanned 300 dpi", scanned), ("scanned 200 dpi", low)):
            t0 = time.perf_counter()
            found = ocr.image_text(image)
            results[name]["seconds"].append(time.perf_counter() - t0)
            results[name]["cer"].append(cer(text, found))
        print(f"page {n + 1}/{args.pages}", file=sys.stderr)
    report = {
        "pages": args.pages,
        "characters per page (mean)": round(statistics.mean(lengths)),
        "tesseract": subprocess.run(
            ["tesseract", "--version"], capture_output=True, text=True
        ).stdout.split("\n")[0],
        "language": ocr.language(),
        **{
            name: {
                "CER mean": round(statistics.mean(r["cer"]), 4),
                "CER max": round(max(r["cer"]), 4),
                "seconds per page (median)": round(statistics.median(r["seconds"]), 2),
            }
            for name, r in results.items()
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
