"""`pgrag tune`: choose a collection's fusion weight from questions about its own chunks.

The built-in fusion (convex, vector weight 0.4) was chosen on SQuAD and held on two manuals
(docs/benchmarks.md, "Fusion that transfers"). A collection whose embedding model is much
stronger or weaker than the bundled one can need another weight; nobody has relevance judgements
for their own documents, so the configured language model writes them: for a seeded sample of
the collection's chunks it writes one question each chunk answers, and that chunk is the
question's relevant passage. Each question is searched once by each arm (search_v5, 40 results:
the depth the hybrid fuses at k = 10), the fusion is scored at every weight from 0 to 1 in steps
of 0.05 (nDCG@10 over chunks), and a new weight is recorded on the collection
(``collections.settings -> 'fusion'``, where search_v5 reads it) only when the best one beats the
collection's current weight on these questions by at least 0.01 nDCG@10 with a paired bootstrap
95% interval above 0; the weight recorded is moved halfway from the current one toward the best,
to a step of 0.05 (the sample is small). Otherwise nothing changes, and the report says why.

Questions made without a model, from the chunks' own sentences with words dropped, were measured
and rejected: they share their passage's exact words, so they always favour the keyword arm, and
the weights they chose were never better than the default (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import (
    CollectionNotFound,
    ConfigError,
    DatabaseError,
    GenerationError,
    InputError,
)
from pgrag.retrieval import fusion

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)

# The built-in default: the convex weight of the vector arm chosen on half of SQuAD v1.1 dev's
# articles (docs/benchmarks.md, "Fusion that transfers"). sql/functions/search.sql has the same.
DEFAULT_VECTOR_WEIGHT = 0.4
METHOD = "convex-z"  # the normalisation search_v5 uses by default (sql/functions/search.sql)
DEPTH = 40  # what search_v5 fuses at k = 10: max(4k, 40) per arm
MIN_QUESTIONS = 20
MIN_GAIN = 0.01
MIN_WEIGHT = 0.05  # a recorded weight stays within [0.05, 0.95]: both arms keep a say
K = 10
GRID = tuple(i / 20 for i in range(21))
SHRINK = 0.5  # how far a recorded weight moves from the current one toward the sample's best

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class WrittenQuestion:
    text: str
    chunk_id: int


@dataclass
class TuneReport:
    collection: str
    questions: int
    current_weight: float  # the collection's vector weight before (its setting, or the default)
    best_weight: float  # the sample's best
    vector_weight: float  # the weight after: recorded, or the current one (keyword: 1 - it)
    ndcg: dict[float, float] = field(default_factory=dict)  # weight -> nDCG@10 on the sample
    current_ndcg: float = math.nan  # nDCG@10 of the current weight on the sample
    gain: float = 0.0  # nDCG@10 of the best weight minus the current one's, on the sample
    gain_low: float = 0.0  # the low end of its bootstrap 95% interval
    examples: list[str] = field(default_factory=list)  # the first questions the model wrote
    reason: str = ""  # why nothing changed, when nothing did
    saved: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ndcg"] = {f"{w:.2f}": round(s, 4) for w, s in self.ndcg.items()}
        return out


PROMPT = (
    "Here is a passage from a collection of documents{title}.\n\n{text}\n\n"
    "Write ONE question that a user of this collection might ask and that this passage"
    " answers. The question must make sense on its own, without the passage: name what it is"
    " about. Do not copy a sentence of the passage; do not ask a yes/no question. Reply with"
    " the question only."
)
MAX_PASSAGE_CHARS = 4000


def written_question(reply: str) -> str | None:
    """The question in a model's reply (its first line), or None when it wrote none: empty,
    no question mark, fewer than 3 or more than 40 words."""
    line = reply.strip().splitlines()[0].strip().strip("\"'").strip() if reply.strip() else ""
    words = len(_WORD.findall(line))
    return line if line.endswith("?") and 3 <= words <= 40 else None


def llm_questions(
    db: Database,
    collection: str,
    client: Any,
    n: int,
    *,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[WrittenQuestion]:
    """Up to ``n`` questions the model wrote, each for one chunk of a seeded sample (a chunk
    it wrote no usable question for is skipped; at most 2n chunks are tried)."""
    rows = db.conn.execute(
        Q.sample_chunks, {"collection": collection, "n": 2 * n, "seed": str(seed)}
    ).fetchall()
    db.conn.commit()
    out: list[WrittenQuestion] = []
    for i, (chunk_id, title, content) in enumerate(rows):
        prompt = PROMPT.format(
            title=f', from "{title}"' if title else "", text=content[:MAX_PASSAGE_CHARS]
        )
        question = written_question(client.complete([{"role": "user", "content": prompt}]))
        if question:
            out.append(WrittenQuestion(question, int(chunk_id)))
        if progress:
            progress("writing questions", len(out), n)
        if len(out) == n or i + 1 == len(rows):
            break
    return out


ArmLists = tuple[list[tuple[int, float]], list[tuple[int, float]]]


def arm_lists(
    db: Database,
    collection: str,
    texts: Sequence[str],
    vectors: Any,
    depth: int = DEPTH,
    progress: Callable[[int, int], None] | None = None,
) -> list[ArmLists]:
    """Each text's keyword list (chunk, BM25) and vector list (chunk, distance), from
    search_v5 as the session may see it."""
    out: list[ArmLists] = []
    for i, text in enumerate(texts):
        kw = db.conn.execute(
            Q.keyword_list, {"collection": collection, "query": text, "k": depth}
        ).fetchall()
        vec = db.conn.execute(
            Q.vector_list, {"collection": collection, "embedding": vectors[i], "k": depth}
        ).fetchall()
        out.append(([(int(c), float(s)) for c, s in kw], [(int(c), float(d)) for c, d in vec]))
        if progress:
            progress(i + 1, len(texts))
    db.conn.commit()
    return out


def ndcg_chunk(ranked: Sequence[tuple[int, float]], target: int, k: int = K) -> float:
    for i, (c, _) in enumerate(ranked[:k]):
        if c == target:
            return 1.0 / math.log2(i + 2)
    return 0.0


def sweep(
    lists: Sequence[ArmLists], targets: Sequence[int], method: str = METHOD
) -> dict[float, float]:
    """nDCG@10 of the convex fusion at every weight of GRID."""
    if not targets:
        return dict.fromkeys(GRID, math.nan)
    return {w: sum(per_question(lists, targets, w, method)) / len(targets) for w in GRID}


def choose(
    scores: dict[float, float], current: float = DEFAULT_VECTOR_WEIGHT
) -> tuple[float, float]:
    """(the weight to record, the sample's best): the best weight (the one nearest the current
    among ties), moved halfway from the current one toward it, to a step of 0.05."""
    top = max(scores.values())
    best = min((w for w, s in scores.items() if s >= top - 1e-9), key=lambda w: abs(w - current))
    return round((current + SHRINK * (best - current)) * 20) / 20, best


def per_question(
    lists: Sequence[ArmLists], targets: Sequence[int], weight: float, method: str = METHOD
) -> list[float]:
    return [
        ndcg_chunk(fusion.fuse(kw, vec, method, alpha=weight), t)
        for (kw, vec), t in zip(lists, targets, strict=True)
    ]


def bootstrap_low(gains: Sequence[float], *, seed: int = 0, rounds: int = 2000) -> float:
    """The 2.5th percentile of the mean of ``gains`` over bootstrap resamples."""
    rng = random.Random(seed)
    n = len(gains)
    means = sorted(sum(gains[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)]


def tune_collection(
    db: Database,
    collection: str,
    *,
    questions: int = 200,
    seed: int = 0,
    save: bool = True,
    client: Any = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> TuneReport:
    """Write questions about ``collection``'s chunks with the configured model (or
    ``client``), score the fusion at every weight, and record a better weight when it is
    clearly better (see the module's docstring); nothing is recorded when ``save`` is false."""
    import psycopg

    from pgrag.embeddings.local import configured_embedder
    from pgrag.llm.configured import configured_chat

    try:
        row = db.conn.execute(Q.collection, {"collection": collection}).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        db.conn.rollback()
        raise DatabaseError(
            f"pgrag tune needs a role that may read collection {collection!r}'s chunks and"
            " update the collection (its owner, or a member of pgrag_writer); this one may not"
        ) from None
    db.conn.commit()
    if row is None:
        raise CollectionNotFound(collection)
    _, embedded, setting = row
    if not embedded:
        raise InputError(
            f"collection {collection!r} has no embedded chunks yet; ingest (and let the"
            " embedding worker finish) before tuning"
        )
    # The fusion the collection's searches use now: its setting (checked by search_v5, which
    # names what is wrong with it), its weights completed with the defaults as search_v5 does.
    try:
        with transaction(db) as conn:
            conn.execute(Q.check_setting, {"collection": collection}).fetchall()
    except DatabaseError as err:
        raise DatabaseError(f"pgrag tune: {err}") from None
    setting = setting if isinstance(setting, dict) else {}
    if setting.get("method", "convex") != "convex":
        raise InputError(
            f"collection {collection!r} fuses with RRF (its settings -> 'fusion'); pgrag tune"
            " chooses the weight of the convex fusion: remove that setting first"
            " (docs/search.md#fusion)"
        )
    vw = float(setting.get("vector_weight", DEFAULT_VECTOR_WEIGHT))
    kw = float(setting.get("keyword_weight", 1 - DEFAULT_VECTOR_WEIGHT))
    current = round(vw / (vw + kw), 4)
    normalization = "minmax" if setting.get("normalization") == "minmax" else "zscore"
    method = "convex-mm" if normalization == "minmax" else METHOD
    if client is None:
        configured = configured_chat(db)
        if configured is None:
            raise ConfigError(
                "pgrag tune needs a language model to write questions about the collection:"
                " set PGRAG_LLM_GGUF (a local model, docs/local.md) or PGRAG_LLM_BASE_URL"
            )
        client = configured[0]
    try:
        sample = llm_questions(db, collection, client, questions, seed=seed, progress=progress)
    except GenerationError as err:
        raise GenerationError(
            f"pgrag tune: the model that writes the questions failed: {str(err).split(';')[0]}"
        ) from None
    if len(sample) < MIN_QUESTIONS:
        raise InputError(
            f"the model wrote {len(sample)} usable questions about collection {collection!r};"
            f" tuning needs at least {MIN_QUESTIONS}: ingest more text, or use a stronger model"
        )
    texts = [q.text for q in sample]
    vectors = configured_embedder(db).embed(texts)

    def searched(done: int, total: int) -> None:
        if progress:
            progress("searching", done, total)

    lists = arm_lists(db, collection, texts, vectors, progress=searched)
    targets = [q.chunk_id for q in sample]
    scores = sweep(lists, targets, method)
    weight, best = choose(scores, current)
    # (Never an arm switched off: a question only one arm can answer would find nothing.)
    weight = min(max(weight, MIN_WEIGHT), 1 - MIN_WEIGHT)
    current_ndcg = sum(per_question(lists, targets, current, method)) / len(targets)
    gains = [
        b - a
        for a, b in zip(
            per_question(lists, targets, current, method),
            per_question(lists, targets, best, method),
            strict=True,
        )
    ]
    gain, low = sum(gains) / len(gains), bootstrap_low(gains, seed=seed)
    report = TuneReport(
        collection=collection,
        questions=len(sample),
        current_weight=current,
        best_weight=best,
        vector_weight=current,
        ndcg=scores,
        current_ndcg=current_ndcg,
        gain=gain,
        gain_low=low,
        examples=texts[:3],
    )
    if gain < MIN_GAIN or low <= 0:
        report.reason = (
            f"the best weight ({best:.2f}) beats the current one ({current:.2f}) by"
            f" {gain:+.4f} nDCG@10 on these questions (95% interval from {low:+.4f}); a change"
            f" needs at least +{MIN_GAIN} with the interval above 0"
        )
        return report
    report.vector_weight = weight
    if save:
        setting = {
            "method": "convex",
            "normalization": normalization,
            "vector_weight": weight,
            "keyword_weight": round(1 - weight, 2),
            "tuned": {"questions": len(sample), "seed": seed, "best": best, "gain": round(gain, 4)},
        }
        with transaction(db) as conn:
            conn.execute(Q.save_fusion, {"collection": collection, "fusion": _json(setting)})
        report.saved = True
    return report


def _json(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)
