"""Getting documents in: reading files (a module per format), chunking, planning what changed,
writing it whole, and removing what is gone.

- ``pipeline``: :func:`~pgrag.ingest.pipeline.ingest` and ``ingest_documents``, which run
  plan → embed → write → maintain.
- ``loaders``: which files, in what format; ``formats/``: one module per format, found by a
  registry; ``document``: the document a format makes (``LoadedFile``, ``from_text``).
- ``plan``: what changed, what is a copy, the chunks to write; ``embed``: vectors for new
  chunk texts; ``writer``: whole documents in transactions; ``indexes``: HNSW and keyword
  upkeep around a load; ``report``: what an ingest did.
- ``removal``: ``pgrag rm`` and ``ingest --prune``.
"""
