"""`pgrag serve`: one long-lived service for applications, agents and people (docs/serve.md).

Nothing is imported here: the CLI reaches these modules lazily, so ``pgrag --help`` stays fast.
"""
