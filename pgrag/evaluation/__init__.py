"""The public metrics API: ranking metrics and answer metrics as plain functions.

    from pgrag.evaluation import ndcg_at, token_f1, RagRecord, rag_report

    ndcg_at(["d3", "d1"], {"d1": 1}, k=10)         # ranking quality, BEIR-compatible
    token_f1("Denver Broncos", ["The Broncos"])     # SQuAD token F1, best over references
    rag_report([RagRecord(...), ...]).to_dict()     # recall, faithfulness, abstention, EM/F1

Ranking metrics (``ndcg_at``, ``recall_at``, ``mrr_at``, ``dcg``, ``summarize``) live in
``pgrag.evaluation.metrics``; answer metrics (``normalize``, ``exact_match``, ``token_f1``,
``rag_report``, ``auroc``) in ``pgrag.evaluation.answer_metrics``. This module only re-exports
them, so code written against ``pgrag.evaluation`` keeps working if they move. Nothing here
needs a database or imports numpy or torch. See docs/metrics.md.
"""

from __future__ import annotations

from pgrag.evaluation.answer_metrics import (
    RagRecord,
    RagReport,
    auroc,
    exact_match,
    normalize,
    rag_report,
    token_f1,
)
from pgrag.evaluation.metrics import Summary, dcg, mrr_at, ndcg_at, percentile, recall_at, summarize

__all__ = [
    "RagRecord",
    "RagReport",
    "Summary",
    "auroc",
    "dcg",
    "exact_match",
    "mrr_at",
    "ndcg_at",
    "normalize",
    "percentile",
    "rag_report",
    "recall_at",
    "summarize",
    "token_f1",
]
