"""Every environment variable pgrag reads, read in one place.

:func:`from_env` takes one snapshot of the environment; :func:`pgrag.connect` takes it when a
connection opens (so ``ask`` never reads the environment while it runs) and the CLI when a
command starts. The families parse what they need from the :class:`Settings` they are given:
``pgrag.llm.chat.LLMConfig.from_settings``, ``pgrag.retrieval.rerank.reranker_from_settings``...
A program that configures pgrag itself builds a :class:`Settings` (``Settings(llm_base_url=...)``,
or ``from_env({...})``) and passes it to :func:`pgrag.connect`.

The table in the README's "Configuration" section is :data:`VARIABLES`; a test keeps the two in
step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

# (environment variable, Settings field, what it means) -- the README's table.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("PGRAG_DSN", "dsn", "PostgreSQL connection string (else `PG*` variables, else the embedded server)"),
    ("PGRAG_SERVER_DIR", "server_dir", "where the embedded server keeps its data"),
    ("PGRAG_READ_DSN", "read_dsn", "a read replica (or several, in libpq's multi-host form: each host failed over on its own) for searches, `ask`'s retrieval and listings; writes stay on `PGRAG_DSN`, and reads fall back to it when the replicas fail ([docs/scale.md](docs/scale.md#read-replicas))"),
    ("PGRAG_READ_YOUR_WRITES", "read_your_writes", "`on`: each read waits for the replica to have replayed the primary's writes so far (else the primary answers it)"),
    ("PGRAG_READ_WAIT_SECONDS", "read_wait_seconds", "how long a read waits for the replica to catch up (2)"),
    ("PGRAG_READ_MAX_LAG_SECONDS", "read_max_lag_seconds", "a replica that has not replayed what the primary wrote this long ago is failed over like one that is down (60; 0: no bound)"),
    ("PGRAG_COLLECTION", "collection", "default collection for `ingest`, `search`, `ask` (default `default`)"),
    ("PGRAG_URL", "service_url", "a running `pgrag serve`, e.g. `http://127.0.0.1:8000`: `pgrag search` and `pgrag ask` call it instead of loading the model ([docs/serve.md](docs/serve.md)); `--dsn` searches locally"),
    ("PGRAG_API_KEY", "service_api_key", "an API key (`pgrag keys create`): what `pgrag search` and `pgrag ask` send to `PGRAG_URL` (and nowhere else), and who `pgrag mcp` reads as"),
    ("PGRAG_EMBEDDING_MODEL", "embedding_model", "a local sentence-transformers directory for new collections, instead of the bundled all-MiniLM-L6-v2 (an existing collection uses its active model: `pgrag models`)"),
    ("PGRAG_QUERY_CACHE", "query_cache", "`off` stops caching query vectors in the database"),
    ("PGRAG_MIN_CONFIDENCE", "min_confidence", "`ask` abstains when the retrieval confidence is below this (`off` for none); else the threshold `pgrag eval answers --save` recorded, else 0.36 for the bundled model ([docs/answers.md](docs/answers.md))"),
    ("PGRAG_LLM_BASE_URL", "llm_base_url", "OpenAI-compatible endpoint for `ask`, e.g. `http://127.0.0.1:8080/v1` (vLLM, llama.cpp server, Ollama, OpenAI)"),
    ("PGRAG_LLM_MODEL", "llm_model", "the endpoint's model name (default `default`; `gpt-4o-mini` on api.openai.com)"),
    ("PGRAG_LLM_API_KEY", "llm_api_key", "the endpoint's API key"),
    ("PGRAG_LLM_TIMEOUT", "llm_timeout", "seconds to wait for the endpoint (60)"),
    ("PGRAG_LLM_TEMPLATE", "llm_template", "`chat` (default, `/v1/chat/completions`) or `base`: a few-shot prompt to `/v1/completions` for base models ([docs/generation.md](docs/generation.md))"),
    ("PGRAG_LLM_TOKENIZER", "llm_tokenizer", "the generator's `tokenizer.json`: count the prompt budget in its tokens instead of the embedding model's"),
    ("PGRAG_LLM_GGUF", "llm_gguf", "a local GGUF model run in-process by llama-cpp-python (`pip install 'pgrag[local]'`): [docs/local.md](docs/local.md)"),
    ("PGRAG_LLM_CTX", "llm_ctx", "the local model's context window in tokens (4096)"),
    ("PGRAG_LLM_THREADS", "llm_threads", "the local model's CPU threads (llama.cpp's default)"),
    ("OPENAI_BASE_URL", "openai_base_url", "the standard name, used when `PGRAG_LLM_BASE_URL` is not set"),
    ("OPENAI_MODEL", "openai_model", "the standard name, used when `PGRAG_LLM_MODEL` is not set"),
    ("OPENAI_API_KEY", "openai_api_key", "sent to `OPENAI_BASE_URL`, or to `https://api.openai.com/...` (never to another `PGRAG_LLM_BASE_URL`)"),
    ("PGRAG_RERANKER", "reranker", "rerank search results with a local cross-encoder directory or a `/rerank` URL ([docs/reranking.md](docs/reranking.md))"),
    ("PGRAG_RERANKER_MODEL", "reranker_model", "the model name a rerank URL expects"),
    ("PGRAG_RERANKER_API_KEY", "reranker_api_key", "sent to the rerank URL only"),
    ("PGRAG_EMBEDDING_API_KEY", "embedding_api_key", "API key for an OpenAI-compatible embedding server (`pgrag models add --api-key-env` names another variable)"),
    ("PGRAG_INGEST_FILE_SECONDS", "ingest_file_seconds", "seconds `ingest` may spend reading, converting and chunking one file before it is refused (300; `off` for no limit; embedding is not counted)"),
    ("PGRAG_JWT_ISSUER", "jwt_issuer", "`pgrag serve` also accepts JWT bearer tokens from this OIDC issuer (its `iss`, e.g. `https://login.example.com/realms/main`); unset: API keys only ([docs/serve.md#who-is-calling](docs/serve.md#who-is-calling))"),
    ("PGRAG_JWT_AUDIENCE", "jwt_audience", "the `aud` those tokens must carry (required with `PGRAG_JWT_ISSUER`)"),
    ("PGRAG_JWT_JWKS_URL", "jwt_jwks_url", "where the issuer's signing keys are (default: the `jwks_uri` of the issuer's `/.well-known/openid-configuration`)"),
    ("PGRAG_JWT_PRINCIPALS_CLAIM", "jwt_principals_claim", "the claim naming the caller's principals: a list of strings, or one string separated by spaces or commas (default `pgrag_principals`; `a.b` reads claim `b` inside claim `a`)"),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """One snapshot of pgrag's configuration. Unset (or blank) variables are None, except
    ``collection``, whose default is ``"default"``."""

    dsn: str | None = None
    server_dir: str | None = None
    read_dsn: str | None = None
    read_your_writes: str | None = None
    read_wait_seconds: str | None = None
    read_max_lag_seconds: str | None = None
    collection: str = "default"
    service_url: str | None = None
    service_api_key: str | None = field(default=None, repr=False)
    embedding_model: str | None = None
    query_cache: str | None = None
    min_confidence: str | None = None
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_timeout: str | None = None
    llm_template: str | None = None
    llm_tokenizer: str | None = None
    llm_gguf: str | None = None
    llm_ctx: str | None = None
    llm_threads: str | None = None
    openai_base_url: str | None = None
    openai_model: str | None = None
    openai_api_key: str | None = None
    reranker: str | None = None
    reranker_model: str | None = None
    reranker_api_key: str | None = None
    embedding_api_key: str | None = None
    ingest_file_seconds: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_jwks_url: str | None = None
    jwt_principals_claim: str | None = None
    # Secrets whose variable a stored model names (``pgrag models add --api-key-env NAME``):
    # the values of every variable named so, taken with the rest of the snapshot.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def reads_your_writes(self) -> bool:
        value = (self.read_your_writes or "off").strip().lower()
        if value not in ("1", "on", "true", "yes", "0", "off", "false", "no", ""):
            from pgrag.errors import ConfigError

            raise ConfigError(
                f"PGRAG_READ_YOUR_WRITES={self.read_your_writes!r} is neither on nor off; set"
                " it to on or off"
            )
        return value in ("1", "on", "true", "yes")

    @property
    def query_cache_enabled(self) -> bool:
        return (self.query_cache or "on").lower() not in ("0", "off", "false", "no")

    def secret(self, variable: str) -> str | None:
        """The value of ``variable`` when the snapshot was taken (for API keys whose variable
        a stored model names); None when unset or blank."""
        if variable == "PGRAG_EMBEDDING_API_KEY":
            return self.embedding_api_key
        if variable == "PGRAG_API_KEY" and self.service_api_key is not None:
            return self.service_api_key
        return self.secrets.get(variable)

    @classmethod
    def variable_of(cls, name: str) -> str:
        """The environment variable behind a field, for messages."""
        for variable, field_name, _ in VARIABLES:
            if field_name == name:
                return variable
        raise KeyError(name)


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Read every variable in :data:`VARIABLES` from ``environ`` (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for variable, name, _ in VARIABLES:
        raw = env.get(variable, "").strip()
        if raw:
            values[name] = raw
    # An API key may sit in any variable a stored model names (pgrag models add --api-key-env).
    secrets = {k: v.strip() for k, v in env.items() if v.strip()}
    names = {f.name for f in fields(Settings)}
    assert set(values) <= names
    return Settings(**values, secrets=secrets)
