"""``pgrag serve``: pgrag as a long-lived HTTP service (FastAPI on uvicorn).

The process loads the embedding model once and keeps a pool of database connections; every
request runs under its caller's principals (an API key's or a JWT's), set per transaction on
the pooled connection, so PostgreSQL's row-level security and SECURITY DEFINER entry points —
not this layer — decide what each caller sees. docs/serve.md is the user's guide.

Nothing here is imported by ``import pgrag`` or by ``pgrag --help``: the web framework loads
only when the service starts (:func:`pgrag.service.app.create_app`).
"""
