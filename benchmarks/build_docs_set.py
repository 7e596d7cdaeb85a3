"""Build a held-out retrieval set from a software manual installed on this machine (not SQuAD).

pgrag's fusion defaults were chosen on SQuAD v1.1 dev (Wikipedia paragraphs, crowd-written
questions). This script makes a set of another kind of text, in the same format (each paragraph
a document; each question's one relevant document is the paragraph it was written from), so that
the defaults can be checked on text they were not chosen on (docs/benchmarks.md, "Fusion that
transfers"):

- **cmake**: the CMake reference manual, reStructuredText from Debian's ``cmake-data`` package
  (``/usr/share/cmake-*/Help``: commands, variables, properties, modules, policies).
- **vim**: Vim's help files (``/usr/share/vim/vim*/doc/*.txt``, Debian's ``vim-runtime``).

Paragraphs of 30-200 words are kept (markup stripped; code blocks and tables dropped), a seeded
sample of --documents of them is the corpus, and for a seeded sample of --questions of those the
configured language model (``PGRAG_LLM_GGUF``: the local model of docs/local.md) writes one
question the paragraph answers, told to name what it asks about and not to copy a sentence. A
question the model fails to write (empty, no question mark, or longer than 40 words) is skipped.
The output is a BEIR directory that ``pgrag eval retrieval`` and ``benchmarks/fusion_eval.py``
read; questions are appended as they are written, so a killed run resumes where it stopped.

    PGRAG_LLM_GGUF=~/.cache/pgrag/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        PYTHONPATH=$PWD .venv-local/bin/python benchmarks/build_docs_set.py cmake \\
        --out ~/.cache/pgrag-bench/cmake-docs --documents 2000 --questions 400

With --questions 0 only the documents are written (no model needed): a corpus for
``benchmarks/write_path.py --data``. With --fragments N the queries are N runs of 6-12
consecutive words of sampled paragraphs (no model): a set for keyword speed, whose quality
figures mean little (a query copies its paragraph's words).

Nothing here is committed but this script: the set is rebuilt from the installed packages.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIN_WORDS, MAX_WORDS = 30, 200

PROMPT = (
    'Here is a paragraph from the {manual}, from the page "{title}".\n\n'
    "{text}\n\n"
    "Write ONE question that a user of {tool} might ask and that this paragraph answers. "
    "The question must make sense on its own, without the paragraph: name the command, "
    "option, variable or feature it is about. Do not copy a sentence of the paragraph; "
    "do not ask a yes/no question. Reply with the question only."
)


def _rst_inline(text: str) -> str:
    text = re.sub(r":[a-z:]+:`([^`]*?)(?:\s+<[^>]*>)?`", r"\1", text)  # :command:`x <y>` -> x
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`_+", r"\1", text)  # `text <url>`_ -> text
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+)`_*", r"\1", text)
    text = re.sub(r"\|([^|\s]+)\|", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def cmake_paragraphs(root: Path) -> list[tuple[str, str]]:
    """(title, paragraph) pairs of every .rst page under ``root``."""
    out: list[tuple[str, str]] = []
    for path in sorted(root.rglob("*.rst")):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        title = path.stem
        for i, line in enumerate(lines[:-1]):
            if line.strip() and re.fullmatch(r"[=\-^~*#]{3,}", lines[i + 1].strip()):
                title = _rst_inline(line)
                break
        block: list[str] = []
        skip_indented = False
        for line in lines + [""]:
            if skip_indented:
                if line.strip() and not line.startswith((" ", "\t")):
                    skip_indented = False
                else:
                    continue
            if line.startswith(".. ") or line.rstrip().endswith("::"):
                if line.rstrip().endswith("::") and not line.startswith(".."):
                    block.append(line.rstrip()[:-1])
                skip_indented = True
                _flush(block, title, out)
                block = []
                continue
            if not line.strip() or re.fullmatch(r"[=\-^~*#+|]{3,}.*", line.strip()):
                _flush(block, title, out)
                block = []
                continue
            if line.startswith((" ", "\t")) and not block:
                continue  # an indented block on its own: an example or a table
            block.append(line.strip())
    return out


def vim_paragraphs(root: Path) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in sorted(root.glob("*.txt")):
        if path.stem.startswith("version") or path.stem in ("todo", "tags"):
            continue  # release notes and lists, not a manual
        title = path.stem
        block: list[str] = []
        in_example = False
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines() + [""]:
            if in_example:
                if line.startswith("<") or (line.strip() and not line[0].isspace()):
                    in_example = False
                    line = line.lstrip("<")
                else:
                    continue
            stripped = line.rstrip()
            if stripped.endswith(">") and not stripped.endswith("->"):
                block.append(stripped[:-1])
                in_example = True
                continue
            if not line.strip() or re.fullmatch(r"[=\-]{5,}", line.strip()):
                _flush(block, title, out)
                block = []
                continue
            text = re.sub(r"\*[^*\s]+\*", " ", line)  # *tags*
            text = re.sub(r"\|([^|\s]+)\|", r"\1", text)
            if text.strip():
                block.append(text.strip())
    return out


def _flush(block: list[str], title: str, out: list[tuple[str, str]]) -> None:
    text = _rst_inline(" ".join(block))
    if (
        MIN_WORDS <= len(text.split()) <= MAX_WORDS
        and sum(c.isalpha() for c in text) > len(text) / 2
    ):
        out.append((title, text))


SOURCES = {
    "cmake": ("CMake reference manual", "CMake", "/usr/share/cmake-*/Help", cmake_paragraphs),
    "vim": ("Vim help", "Vim", "/usr/share/vim/vim*/doc", vim_paragraphs),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", choices=sorted(SOURCES))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument(
        "--fragments",
        type=int,
        default=0,
        metavar="N",
        help="instead of a model's questions: N queries of 6-12 consecutive words of a sampled"
        " paragraph (no model; for keyword speed, not for quality)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    manual, tool, pattern, reader = SOURCES[args.source]
    roots = sorted(Path("/").glob(pattern.lstrip("/")))
    if not roots:
        sys.exit(f"{pattern}: not installed (apt-get install cmake-data / vim-runtime)")
    seen: set[str] = set()
    paragraphs = []
    for title, text in reader(roots[-1]):
        if text not in seen:
            seen.add(text)
            paragraphs.append((title, text))
    rng = random.Random(args.seed)
    rng.shuffle(paragraphs)
    corpus = paragraphs[: args.documents]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "qrels").mkdir(exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i, (title, text) in enumerate(corpus):
            f.write(json.dumps({"_id": f"d{i}", "title": title, "text": text}) + "\n")
    print(f"{len(paragraphs)} paragraphs in {roots[-1]}; corpus of {len(corpus)}", file=sys.stderr)

    queries_path = args.out / "queries.jsonl"
    qrels_path = args.out / "qrels" / "test.tsv"
    done = set()
    if queries_path.exists():
        done = {json.loads(line)["_id"] for line in queries_path.open(encoding="utf-8")}
    if not qrels_path.exists():
        qrels_path.write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    queries_path.touch()  # (--questions 0: the documents alone, for benchmarks/write_path.py)
    if args.fragments:
        with queries_path.open("w", encoding="utf-8") as q, qrels_path.open("w") as r:
            r.write("query-id\tcorpus-id\tscore\n")
            for n in range(args.fragments):
                i = rng.randrange(len(corpus))
                words = corpus[i][1].split()
                size = rng.randint(6, 12)
                start = rng.randrange(max(1, len(words) - size))
                text = " ".join(words[start : start + size])
                q.write(json.dumps({"_id": f"f{n}", "text": text}) + "\n")
                r.write(f"f{n}\td{i}\t1\n")
        return
    picks = list(range(len(corpus)))
    rng.shuffle(picks)
    picks = [i for i in picks[: args.questions] if f"q{i}" not in done]
    if not picks:
        return
    from pgrag.config import from_env
    from pgrag.llm.configured import chat_client
    from pgrag.llm.local import config_from_settings

    config = config_from_settings(from_env())
    if config is None:
        sys.exit(
            "set PGRAG_LLM_GGUF (docs/local.md) or PGRAG_LLM_BASE_URL: a model writes the questions"
        )
    client = chat_client(config)
    t0 = time.perf_counter()
    written = 0
    for n, i in enumerate(picks, 1):
        title, text = corpus[i]
        prompt = PROMPT.format(manual=manual, title=title, text=text, tool=tool)
        reply = client.complete([{"role": "user", "content": prompt}]).strip().strip('"').strip()
        question = reply.splitlines()[0].strip() if reply else ""
        if not question.endswith("?") or len(question.split()) > 40 or len(question) < 10:
            continue
        with queries_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"_id": f"q{i}", "text": question}) + "\n")
        with qrels_path.open("a", encoding="utf-8") as f:
            f.write(f"q{i}\td{i}\t1\n")
        written += 1
        if n % 10 == 0:
            rate = (time.perf_counter() - t0) / n
            print(f"{n}/{len(picks)} asked, {written} written, {rate:.1f} s each", file=sys.stderr)


if __name__ == "__main__":
    main()
