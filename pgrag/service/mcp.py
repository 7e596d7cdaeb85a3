"""pgrag as an MCP server (the official ``mcp`` SDK): tools an agent calls to search, get
cited answers, read whole documents and list collections, each run under the caller's
principals, so PostgreSQL decides what the agent sees.

Two transports serve the same tools:

- stdio (``pgrag mcp``, :func:`run_stdio`): one caller for the life of the process, named
  by ``--principal``, an API key (``PGRAG_API_KEY``) or, without either, the connecting role;
- streamable HTTP at ``/mcp`` in ``pgrag serve`` (:class:`HttpTransport`): every request is
  authenticated from its ``Authorization: Bearer`` header like the REST routes, and the tools
  read as that request's caller. Stateless (no MCP session is kept between requests), so any
  replica behind a load balancer answers any request.

Tool failures (a bad argument, an unknown collection, a document the caller may not read)
are tool errors (``isError``) with pgrag's one-line message, which an agent can read and act on.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from pgrag.errors import PgragError
from pgrag.service.auth import Caller, Unauthorized
from pgrag.service.runtime import Work
from pgrag.version import __version__

if TYPE_CHECKING:
    from mcp_types import CallToolResult, InputRequiredResult
    from starlette.routing import Route
    from starlette.types import Receive, Scope, Send

    from pgrag.service.runtime import Service

T = TypeVar("T")
# Where the HTTP transport leaves the authenticated caller for the tools (the ASGI scope of
# the request that carries the tool call).
CALLER_KEY = "pgrag.caller"
MAX_K = 50  # passages per call: more would flood an agent's context

INSTRUCTIONS = (
    "pgrag answers from the user's own documents, with sources. Use `search` to find passages"
    " (cite their source), `ask` for an answer with numbered citations (it abstains, with a"
    " reason, when the documents do not answer), `fetch_document` to read a whole document a"
    " result came from (pass its chunk_id or source), and `list_collections` to see what can be"
    " searched. Everything is limited to what the credentials in use may read."
)


# -- what the tools return (their output schemas) --------------------------------------------


class Passage(BaseModel):
    rank: int
    chunk_id: int = Field(description="Pass to fetch_document to read the whole document.")
    document_id: int
    source: str = Field(description="Where the passage comes from (a path or URI): cite it.")
    title: str | None
    section: str | None = Field(description='The heading path, e.g. "Billing > Refunds".')
    text: str
    score: float
    metadata: dict[str, Any]


class SearchOutput(BaseModel):
    collection: str
    query: str
    results: list[Passage]


class Citation(BaseModel):
    n: int = Field(description="The number the answer cites as [n].")
    chunk_id: int
    document_id: int
    source: str
    title: str | None
    section: str | None


class AskOutput(BaseModel):
    answer: str = Field(description="The answer, citing sources as [n]; empty when abstained.")
    abstained: bool = Field(description="True when the documents do not answer the question.")
    reason: str | None = Field(description="Why it abstained (or a note on the answer).")
    citations: list[Citation]
    sources: list[dict[str, Any]] = Field(
        description="The passages the answer was written from: n, chunk_id, source, text, ..."
    )
    query_id: int | None = Field(description="The question's entry in pgrag's question log.")
    collection: str


class DocumentPart(BaseModel):
    chunk_id: int
    ordinal: int
    section: str | None
    page: int | None


class DocumentOutput(BaseModel):
    collection: str
    document_id: int
    source: str
    title: str | None
    metadata: dict[str, Any]
    updated_at: datetime | None
    text: str = Field(description="The document's text, its chunks joined in order.")
    parts: list[DocumentPart] = Field(description="The chunks the text is made of, in order.")
    chunks: int = Field(description="How many chunks the document has in all.")
    truncated: bool = Field(description="True when text holds only the first max_chunks.")


class CollectionInfo(BaseModel):
    name: str
    model: str | None
    dimension: int | None
    documents: int | None = Field(description="Documents you may read in it.")
    chunks: int | None
    estimated: bool | None


class CollectionsOutput(BaseModel):
    collections: list[CollectionInfo]


# -- the server -------------------------------------------------------------------------------


class _Server(MCPServer):
    """MCPServer whose argument errors are one line naming the argument, and which refuses
    arguments a tool does not take (a misspelt ``colection`` would otherwise be dropped
    silently and the default collection searched)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arguments: dict[str, list[str]] = {}

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None = None,
    ) -> CallToolResult | InputRequiredResult:
        known = self.arguments.get(name)
        if known is not None:
            unknown = sorted(set(arguments) - set(known))
            if unknown:
                raise ToolError(
                    f"{name} takes no argument {', '.join(map(repr, unknown))}: its arguments"
                    f" are {', '.join(known)}"
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as err:
            cause = err.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"invalid arguments for {name}: {_problems(cause)}") from cause
            raise


def _problems(err: ValidationError) -> str:
    out = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e.get("loc", ())) or "arguments"
        out.append(f"{where}: {e.get('msg', 'invalid')}")
    return "; ".join(out)


async def _blocking(fn: Callable[[Work], T]) -> T:
    """Run blocking ``fn(work)`` in a worker thread; if the call is cancelled (the client
    cancels it, or disconnects), the statement it runs is cancelled in PostgreSQL."""
    work = Work()
    try:
        return await anyio.to_thread.run_sync(fn, work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        work.stop()
        raise


class Tools:
    """The tools, bound to a :class:`Service`. ``local`` is the caller of a transport that
    has no requests of its own (stdio); over HTTP each request's caller is read from it."""

    def __init__(
        self,
        svc: Service,
        local: Caller | None = None,
        warming: threading.Thread | None = None,
        key: str | None = None,
    ) -> None:
        self.svc = svc
        self.local = local
        self.warming = warming  # loading the model: a call that needs it waits, not loads again
        # The API key stdio's caller came from: checked again on every call, so a key that is
        # revoked or expires stops a running `pgrag mcp` at its next call, as over HTTP.
        self.key = key

    def caller(self, ctx: Context[Any, Any]) -> Caller:
        request = ctx.request_context.request
        if request is not None:
            found = getattr(request, "scope", {}).get(CALLER_KEY)
            if isinstance(found, Caller):
                return found
        elif self.local is not None:
            return self.local
        # Fail closed: the HTTP transport always sets a caller, stdio always has one.
        raise Unauthorized("this MCP request carries no credentials the service checked")

    def _collection(self, collection: str | None) -> str:
        return collection or self.svc.settings.collection

    async def _call(self, ctx: Context[Any, Any], fn: Callable[[Caller, Work], T]) -> T:
        try:
            who = self.caller(ctx)
            key = self.key if who is self.local else None

            def run(work: Work) -> T:
                caller = who if key is None else self.svc.authenticate(f"Bearer {key}")
                caller.require("read")
                return fn(caller, self._warm(work))

            return await _blocking(run)
        except PgragError as err:
            raise ToolError(str(err)) from err

    def _warm(self, work: Work) -> Work:
        if self.warming is not None and self.warming.is_alive():
            self.warming.join()
        return work

    async def search(
        self,
        query: Annotated[str, Field(description="What to search for: a question or keywords.")],
        ctx: Context[Any, Any],
        collection: Annotated[
            str | None, Field(description="The collection to search (default: the server's).")
        ] = None,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many passages.")] = 5,
        mode: Annotated[
            Literal["hybrid", "keyword", "vector"],
            Field(description="hybrid (default): keywords and meaning; or one of the two."),
        ] = "hybrid",
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description='A metadata filter, e.g. {"team": "billing"} or'
                ' {"year": {"$gte": 2024}} (pgrag docs/search.md#filters).'
            ),
        ] = None,
    ) -> SearchOutput:
        """Search the documents for passages about a query, best first, each with its source,
        title, section and chunk_id."""
        from pgrag.retrieval.search import search

        name = self._collection(collection)

        def work(who: Caller, job: Work) -> SearchOutput:
            timings: dict[str, float] = {}
            with self.svc.database(who, job) as db:
                results = search(
                    db, query, collection=name, k=k, mode=mode, filter=filter, timings=timings
                )
            self.svc.metrics.observe_timings("mcp:search", timings)
            return SearchOutput(
                collection=name,
                query=query,
                results=[Passage.model_validate(r.to_dict()) for r in results],
            )

        return await self._call(ctx, work)

    async def ask(
        self,
        question: Annotated[str, Field(description="The question, in full sentences.")],
        ctx: Context[Any, Any],
        collection: Annotated[
            str | None, Field(description="The collection to answer from (default: the server's).")
        ] = None,
        k: Annotated[
            int, Field(ge=1, le=MAX_K, description="How many passages to answer from.")
        ] = 8,
    ) -> AskOutput:
        """Answer a question from the documents, citing them as [n]; abstains (with the
        reason) when they do not hold the answer."""
        from pgrag.answer.ask import ask

        name = self._collection(collection)

        def work(who: Caller, job: Work) -> AskOutput:
            def on_token(_text: str) -> None:
                job.check()  # a cancelled call stops its generation

            with self.svc.database(who, job) as db:
                answer = ask(db, question, collection=name, k=k, on_token=on_token)
            self.svc.metrics.observe_timings("mcp:ask", answer.timings)
            out = answer.to_dict()
            return AskOutput(
                answer=out["answer"],
                abstained=out["abstained"],
                reason=out["reason"],
                citations=[Citation.model_validate(c) for c in out["citations"]],
                sources=out["sources"],
                query_id=out["query_id"],
                collection=name,
            )

        return await self._call(ctx, work)

    async def fetch_document(
        self,
        ctx: Context[Any, Any],
        chunk_id: Annotated[
            int | None,
            Field(ge=1, description="A chunk_id from search or a citation: its whole document."),
        ] = None,
        source: Annotated[
            str | None, Field(description="Or the document's source, as results show it.")
        ] = None,
        collection: Annotated[
            str | None,
            Field(description="The collection of source (default: the server's)."),
        ] = None,
        max_chunks: Annotated[
            int, Field(ge=1, le=10_000, description="Read at most this many chunks.")
        ] = 200,
    ) -> DocumentOutput:
        """Read a whole document: the one a search result or citation came from (its
        chunk_id), or the one with a source in a collection."""
        from pgrag.retrieval.documents import fetch_document

        # A chunk id names its document in any collection, unless one is given.
        name = collection if chunk_id is not None else self._collection(collection)

        def work(who: Caller, job: Work) -> DocumentOutput:
            with self.svc.database(who, job) as db:
                doc = fetch_document(
                    db, source, collection=name, chunk_id=chunk_id, max_chunks=max_chunks
                )
            return DocumentOutput.model_validate(doc.to_dict())

        return await self._call(ctx, work)

    async def list_collections(self, ctx: Context[Any, Any]) -> CollectionsOutput:
        """The collections there are, with how many documents in each you may read."""
        from pgrag.collections import list_collections

        def work(who: Caller, job: Work) -> CollectionsOutput:
            with self.svc.database(who, job) as db:
                rows = list_collections(db)
            return CollectionsOutput(collections=[CollectionInfo.model_validate(r) for r in rows])

        return await self._call(ctx, work)


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def create_server(
    svc: Service,
    local: Caller | None = None,
    warming: threading.Thread | None = None,
    key: str | None = None,
) -> MCPServer:
    """The MCP server with pgrag's tools over ``svc`` (see :class:`Tools` for ``local`` and
    ``key``); ``warming``, a thread that loads the model, is started when the server starts."""
    tools = Tools(svc, local, warming, key)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict[str, Any]]:
        if warming is not None:
            warming.start()
        yield {}

    with _logging_untouched():
        server = _Server(
            name="pgrag",
            title="pgrag",
            version=__version__,
            instructions=INSTRUCTIONS,
            log_level="WARNING",
            lifespan=lifespan,
        )
    answering = ToolAnnotations(
        # It adds the question to pgrag's question log, and changes nothing else.
        read_only_hint=False,
        destructive_hint=False,
        open_world_hint=False,
    )
    for fn, title, hints in (
        (tools.search, "Search documents", READ_ONLY),
        (tools.ask, "Ask the documents", answering),
        (tools.fetch_document, "Read a document", READ_ONLY),
        (tools.list_collections, "List collections", READ_ONLY),
    ):
        server.add_tool(fn, title=title, annotations=hints, structured_output=True)
        server.arguments[fn.__name__] = [p for p in inspect.signature(fn).parameters if p != "ctx"]
    return server


@contextmanager
def _logging_untouched() -> Iterator[None]:
    """The SDK's server calls ``logging.basicConfig`` (a rich handler on the root logger) when
    it is built; the process's logging is not the SDK's to set. basicConfig does nothing while
    the root logger has a handler, so give it one for the moment."""
    root = logging.getLogger()
    placeholder = None if root.handlers else logging.NullHandler()
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        yield
    finally:
        if placeholder is not None:
            root.removeHandler(placeholder)


# -- transports -------------------------------------------------------------------------------


class HttpTransport:
    """``/mcp`` in ``pgrag serve``: streamable HTTP (stateless), each request authenticated
    with the service's credentials before the MCP layer sees it. :meth:`running` must be
    entered in the app's lifespan (the SDK's session manager runs in it)."""

    PATH = "/mcp"

    def __init__(self, svc: Service) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        self.svc = svc
        self.server = create_server(svc)
        security = None
        if svc.config.no_auth:
            # Without credentials a web page could reach a loopback service by DNS
            # rebinding; the Host (and any Origin) must then be the loopback one.
            loopback = ["127.0.0.1", "localhost", "[::1]"]
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=[f"{h}:*" for h in loopback] + loopback,
                allowed_origins=[f"http://{h}:*" for h in loopback] + list(svc.config.cors_origins),
            )
        # Builds the session manager (the Starlette app it returns is not used: the route
        # below hands requests to the manager itself).
        self.server.streamable_http_app(
            streamable_http_path=self.PATH,
            stateless_http=True,
            transport_security=security,
        )
        self.manager = self.server.session_manager

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    def route(self) -> Route:
        from starlette.routing import Match, Route

        class Named(Route):
            # Like FastAPI's routes, it names itself in the scope, so the request metrics
            # count /mcp by its template rather than as unmatched.
            def matches(self, scope: Scope) -> tuple[Match, Scope]:
                match, child = super().matches(scope)
                if match != Match.NONE:
                    child["route"] = self
                return match, child

        return Named(self.PATH, endpoint=self, methods=["GET", "POST", "DELETE"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.concurrency import run_in_threadpool
        from starlette.datastructures import Headers

        from pgrag.service.errors import error_response

        header = Headers(scope=scope).get("authorization")
        try:
            who = await run_in_threadpool(self.svc.authenticate, header)
            who.require("read")
        except PgragError as err:
            await error_response(err)(scope, receive, send)
            return
        scope[CALLER_KEY] = who
        await self.manager.handle_request(scope, receive, send)


async def run_stdio(
    svc: Service, caller: Caller, *, warm: bool = True, key: str | None = None
) -> None:
    """Serve the tools over stdin/stdout as ``caller`` until stdin closes. While it runs,
    file descriptor 1 points at stderr (the SDK's doing), so nothing but the protocol
    reaches stdout. With ``warm`` the model loads in the background as it starts, so the
    client's handshake and tool listing do not wait for it (a search does)."""
    warming = threading.Thread(target=_load_model, args=(svc,), name="pgrag-warm", daemon=True)
    server = create_server(svc, caller, warming if warm else None, key)
    await server.run_stdio_async()


def _load_model(svc: Service) -> None:
    from pgrag.embeddings.local import default_embedder

    try:
        default_embedder(svc.settings.embedding_model).embed(["warm up"])
    except Exception as err:  # the first search that needs it says what is wrong
        logging.getLogger("pgrag.service").warning("the model did not load: %s", err)
