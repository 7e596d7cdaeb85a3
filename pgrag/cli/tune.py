"""``pgrag tune``: choose a collection's fusion weight from questions about its own chunks."""

from __future__ import annotations

import click

from pgrag.cli.options import collection_option, database, emit_json, json_option
from pgrag.cli.output import echo


@click.command()
@collection_option
@click.option(
    "--questions",
    type=click.IntRange(min=20, max=2000),
    default=200,
    show_default=True,
    help="Questions the model writes, one per sampled chunk.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Which chunks are sampled.")
@click.option("--dry-run", is_flag=True, help="Report what would change; record nothing.")
@json_option
@click.pass_context
def tune(
    ctx: click.Context, collection: str, questions: int, seed: int, dry_run: bool, as_json: bool
) -> None:
    """Choose the collection's fusion weight from questions the configured language model
    (PGRAG_LLM_GGUF or PGRAG_LLM_BASE_URL) writes about a sample of its chunks.

    Each question is searched by both arms and the fusion scored at every weight; a new weight
    is recorded on the collection (collections.settings -> 'fusion', which search_v5 reads)
    only when it beats the current one on these questions by at least 0.01 nDCG@10, with a
    bootstrap interval above 0. A search that passes --vector-weight or --rrf-k still chooses
    for itself. See docs/search.md#fusion.
    """
    from pgrag.retrieval.tuning import tune_collection

    db = database(ctx)
    shown: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        step = max(1, total // 4)
        if done == total or done // step > shown.get(stage, -1):
            shown[stage] = done // step
            echo(f"{stage}: {done}/{total}", err=True)

    report = tune_collection(
        db, collection, questions=questions, seed=seed, save=not dry_run, progress=progress
    )
    if as_json:
        emit_json(report.to_dict())
        return
    echo(
        f"{report.collection}: {report.questions} questions; nDCG@10 on them: keyword alone"
        f" {report.ndcg[0.0]:.3f}, vector alone {report.ndcg[1.0]:.3f}, current weight"
        f" {report.current_weight:.2f} {report.current_ndcg:.3f},"
        f" best {report.best_weight:.2f} {report.ndcg[report.best_weight]:.3f}"
    )
    if report.reason:
        echo(f"unchanged: {report.reason}")
        return
    verb = "would record" if dry_run else "recorded"
    echo(
        f"{verb}: vector weight {report.vector_weight:.2f}, keyword weight"
        f" {1 - report.vector_weight:.2f} (gain {report.gain:+.4f} nDCG@10, 95% interval from"
        f" {report.gain_low:+.4f})"
    )
