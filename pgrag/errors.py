"""The one exception tree pgrag raises; the CLI turns these into one-line messages.

Every message says what to do next. Catch :class:`PgragError` for all of them, or a subclass
for one kind of trouble::

    PgragError
    ├── ConfigError            configuration is missing or contradictory
    ├── InputError             a file or argument given by the user cannot be used
    │   ├── CollectionNotFound no collection of that name
    │   ├── ConversationNotFound  no conversation of that id is the caller's
    │   └── ConversationConflict  the conversation went on while an answer was made
    ├── SchemaError            the database schema is missing, or not what this release expects
    │   ├── SchemaNotReady     not installed, or at another revision: run `pgrag db upgrade`
    │   └── SchemaDrift        objects changed by hand: `pgrag db check` names them
    ├── DatabaseError          PostgreSQL refused a statement (its message, on one line)
    ├── ServerError            the embedded PostgreSQL server could not be started or reached
    ├── GenerationError        the language-model endpoint failed or answered something unusable
    └── RerankError            the reranker failed or answered something unusable
"""

from __future__ import annotations

import shlex


def command_line(*words: str) -> str:
    """A command line for a message, in backquotes, each word quoted as a shell needs it
    (``pgrag models list -c 'it'"'"'s'``), so that pasting it runs what it says."""
    return f"`{shlex.join(words)}`"


class PgragError(Exception):
    """Base class for errors pgrag reports to users. The message says what to do next."""


class ConfigError(PgragError):
    """Configuration is missing or contradictory."""


class InputError(PgragError):
    """A file or argument given by the user cannot be used."""


class SkippedInput(InputError):
    """A file a directory walk leaves out with a warning (a dangling symbolic link): reported
    and counted, but not a failure of the ingest."""


class NotText(InputError):
    """A file read as text that is not text: NUL bytes, or bytes that are not UTF-8 (a binary
    file of a kind no format module reads, or text in another encoding)."""


class CollectionNotFound(InputError):
    """No collection of that name exists (or none the session may see)."""

    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        super().__init__(
            message or f"collection {name!r} does not exist; `pgrag collections` lists them"
        )


class ConversationNotFound(InputError):
    """No conversation of that id is the caller's (none exists, or another caller's does)."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(
            f"conversation {conversation_id} does not exist or is another caller's; start a new"
            " one (conversation_id 'new') or continue one this caller started"
        )


class ConversationConflict(InputError):
    """Another request added turns to the conversation while this answer was being made (its
    citation numbers were chosen from the turns read before): nothing was stored."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(
            f"conversation {conversation_id} went on while this answer was made, so it was not"
            " stored; ask the question again"
        )


class SchemaError(PgragError):
    """The database schema is missing, or is not what this release of pgrag expects."""


class SchemaNotReady(SchemaError):
    """pgrag's schema is not installed, or is at a revision other than this release's."""


class SchemaDrift(SchemaError):
    """Objects of pgrag's schema differ from what this release installs (changed by hand)."""


class DatabaseError(PgragError):
    """PostgreSQL refused a statement; the message is the server's, on one line."""


class ServerError(PgragError):
    """The embedded PostgreSQL server could not be started or reached."""


class GenerationError(PgragError):
    """The language-model endpoint failed or answered something unusable."""


class RerankError(PgragError):
    """The reranker (a local cross-encoder or an HTTP rerank endpoint) failed or answered
    something unusable."""
