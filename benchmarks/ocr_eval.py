"""OCR speed and character accuracy on pages rendered from known text (issue 20, item 3).

Pages of known text (paragraphs of the CMake manual installed by Debian's cmake-data, or of
this repository's docs when it is missing) are drawn in black on white with Pillow's bundled
font, at a size like 11-point type scanned at 300 dpi, then made to look scanned: turned by a
fraction of a degree, blurred a little and speckled with noise. pgrag's OCR (Tesseract, run by
pgrag.ingest.ocr) reads each; reported per setting: the character error rate
(edit distance / length, whitespace runs counted as one space) and seconds per page, beside a
clean page (no scan effects), and the same scanned page at 200 dpi (scaled by 2/3).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/ocr_eval.py --pages 10

With --engine rapidocr or both, the same pages are also read by RapidOCR (the
``rapidocr-onnxruntime`` 1.4 package from the package index: PaddleOCR's PP-OCRv4 detection
and Chinese+English recognition models as ONNX, shipped inside its wheel, run by
onnxruntime), twice: with one onnxruntime thread (and one OpenCV thread), like Tesseract's
one thread a page, and with onnxruntime's default threads. It is imported only when asked
for; install it in a venv of its own (it pulls in onnxruntime, OpenCV and numpy):

    python3 -m venv /tmp/ocr-venv
    /tmp/ocr-venv/bin/pip install 'rapidocr-onnxruntime>=1.4,<1.5' pillow pypdfium2
    PYTHONPATH=$PWD /tmp/ocr-venv/bin/python benchmarks/ocr_eval.py --pages 6 --engine both

RapidOCR answers a box per run of text; the boxes are put back into lines (see
``rapid_lines``) so that its text compares with Tesseract's on the same footing. Its
``max_side_len`` (default 2000 pixels, the package's own) shrinks a larger page before
detection, so a 300 dpi A4 page is read at about 170 dpi; --rapidocr-max-side 4000 reads it
whole.
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
    return [
        p for d in docs for p in d.read_text().split("\n\n") if len(p.split()) > 30 and "|" not in p
    ]


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


def rapid_lines(boxes: list[Any]) -> str:
    """RapidOCR's boxes ([corners, text, score]) as lines of text in reading order: sorted by
    the vertical centre of each box, a box joins the line above when its centre is within half
    the median box height of that line's mean centre; a line's boxes are sorted by their left
    edge and joined by a space, and lines by a newline."""
    items = []
    for corners, text, _score in boxes:
        ys = [point[1] for point in corners]
        items.append(
            (sum(ys) / len(ys), max(ys) - min(ys), min(point[0] for point in corners), text)
        )
    if not items:
        return ""
    items.sort()
    half = statistics.median(height for _, height, _, _ in items) / 2
    lines: list[list[tuple[float, float, float, str]]] = []
    for item in items:
        if lines and abs(item[0] - statistics.mean(i[0] for i in lines[-1])) <= half:
            lines[-1].append(item)
        else:
            lines.append([item])
    return "\n".join(" ".join(i[3] for i in sorted(line, key=lambda i: i[2])) for line in lines)


def rapid_engines(max_side: int) -> dict[str, Any]:
    """RapidOCR readers by name: one onnxruntime (and OpenCV) thread, and the defaults."""
    try:
        import cv2
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as err:
        hint = "pip install 'rapidocr-onnxruntime>=1.4,<1.5'"
        sys.exit(f"ocr_eval: --engine rapidocr needs {hint} ({err.name} is missing)")
    from PIL import Image, ImageDraw, ImageFont

    default_cv_threads = cv2.getNumThreads()
    engines: dict[str, Any] = {}
    for name, threads in (("rapidocr 1 thread", 1), ("rapidocr default threads", -1)):
        reader = RapidOCR(
            intra_op_num_threads=threads, inter_op_num_threads=threads, max_side_len=max_side
        )

        def read(image: Any, reader: Any = reader, threads: int = threads) -> str:
            cv2.setNumThreads(1 if threads == 1 else default_cv_threads)
            boxes, _ = reader(image.convert("L"))
            return rapid_lines(boxes or [])

        warm = Image.new("L", (900, 120), 255)
        ImageDraw.Draw(warm).text(
            (20, 30), "Warm up the sessions", fill=0, font=ImageFont.load_default(size=FONT_PX)
        )
        read(warm)  # the first run of a session allocates: not a page's time
        engines[name] = read
    return engines


def rapid_about(max_side: int) -> dict[str, Any]:
    from importlib.metadata import version

    from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH
    from rapidocr_onnxruntime.utils import read_yaml

    config = read_yaml(str(DEFAULT_CFG_PATH))
    return {
        "version": version("rapidocr-onnxruntime"),
        "onnxruntime": version("onnxruntime"),
        "models": {part: Path(config[part]["model_path"]).name for part in ("Det", "Cls", "Rec")},
        "max_side_len": max_side,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", choices=("tesseract", "rapidocr", "both"), default="tesseract")
    parser.add_argument(
        "--rapidocr-max-side", type=int, default=2000, help="RapidOCR's max_side_len"
    )
    args = parser.parse_args()
    engines: dict[str, Any] = {}
    if args.engine in ("tesseract", "both"):
        why = ocr.missing()
        if why is not None:
            sys.exit(f"ocr_eval: {why}")
        engines["tesseract"] = ocr.image_text
    if args.engine in ("rapidocr", "both"):
        engines.update(rapid_engines(args.rapidocr_max_side))
    rng = random.Random(args.seed)
    pool = paragraphs()
    settings = ("clean 300 dpi", "scanned 300 dpi", "scanned 200 dpi")
    results: dict[tuple[str, str], dict[str, list[float]]] = {
        (name, engine): {"cer": [], "seconds": []} for name in settings for engine in engines
    }
    lengths = []
    for n in range(args.pages):
        text = page_text(rng, pool)
        lengths.append(len(text))
        clean = render(text, False, rng)
        scanned = render(text, True, rng)
        low = scanned.resize((WIDTH * 2 // 3, HEIGHT * 2 // 3))
        for name, image in zip(settings, (clean, scanned, low), strict=True):
            for engine, read in engines.items():
                t0 = time.perf_counter()
                found = read(image)
                results[name, engine]["seconds"].append(time.perf_counter() - t0)
                results[name, engine]["cer"].append(cer(text, found))
        print(f"page {n + 1}/{args.pages}", file=sys.stderr)

    def summary(r: dict[str, list[float]]) -> dict[str, float]:
        return {
            "CER mean": round(statistics.mean(r["cer"]), 4),
            "CER max": round(max(r["cer"]), 4),
            "seconds per page (median)": round(statistics.median(r["seconds"]), 2),
        }

    report: dict[str, Any] = {
        "pages": args.pages,
        "characters per page (mean)": round(statistics.mean(lengths)),
    }
    if "tesseract" in engines:
        report["tesseract"] = subprocess.run(
            ["tesseract", "--version"], capture_output=True, text=True
        ).stdout.split("\n")[0]
        report["language"] = ocr.language()
    if args.engine != "tesseract":
        report["rapidocr"] = rapid_about(args.rapidocr_max_side)
    for name in settings:
        if args.engine == "tesseract":
            report[name] = summary(results[name, "tesseract"])
        else:
            report[name] = {engine: summary(results[name, engine]) for engine in engines}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
