"""The one exception tree pgrag raises; the CLI turns these into one-line messages."""


class PgragError(Exception):
    """Base class for errors pgrag reports to users. The message says what to do next."""


class ConfigError(PgragError):
    """Configuration is missing or contradictory."""


class SchemaError(PgragError):
    """The database schema is missing or at the wrong revision."""


class InputError(PgragError):
    """A file or argument given by the user cannot be used."""


class GenerationError(PgragError):
    """The language-model endpoint failed or answered something unusable."""


class ServerError(PgragError):
    """The embedded PostgreSQL server could not be started or reached."""


class DatabaseError(PgragError):
    """PostgreSQL refused a statement; the message is the server's, on one line."""


class RerankError(PgragError):
    """The reranker (a local cross-encoder or an HTTP rerank endpoint) failed or answered
    something unusable."""
