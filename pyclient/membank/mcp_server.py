"""``membank mcp``: membank as a Model Context Protocol server (the ``mcp`` Python SDK).

Tools: ``create_memory``, ``retrieve_memories``, ``list_memories``,
``update_memory``, ``delete_memory``, ``generate_memories``,
``add_messages`` (OpenAI-style chat messages), ``get_operation`` and ``retrieve_profiles``. Each tool is one
call of the SQL function of the same name; its JSON schema carries the SQL API's limits (docs/memories.md,
Limits table), so a client sees them before it calls.

**Scope.** With ``--scope`` the scope is fixed for the server: no tool takes
a ``scope`` argument (it is in no schema; a ``scope`` sent anyway is refused
as an unknown argument, and the fixed one is set last), and every call passes the fixed scope to SQL, including
``get``/``update``/``delete`` by name, so a name from another scope is "not
found". This is the mode for an agent acting for one user: the model chooses
the arguments, so nothing it says can reach another user's memories.
Without ``--scope`` every tool takes a required ``scope`` argument (per
call): for a trusted client that serves several scopes itself.

**Embeddings.** The server stores facts; their vectors come from a worker
(``membank worker``) running beside it. Until a fact is embedded it is found
by full text only (``degraded: true``).

**Errors.** A refused argument is one line naming it (``argument top_k:
Input should be less than or equal to 100``); every tool's input schema has
``additionalProperties: false`` and an argument it does not list is refused
the same way (``argument expected_revison: not an argument of update_memory
...``), never dropped; an error of the SQL API is ``[SQLSTATE] message
(hint: ...)``, e.g. ``[MB003]`` for an update or delete whose
``expected_revision`` is stale.
"""

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any

from pydantic import Field

# The SQL API's limits (docs/memories.md, "Limits"); the SQL functions enforce them, the
# schemas below announce them.
FACT_MAX = 32768
TOPICS_MAX = 32
TOPIC_LABEL_MAX = 128
SCOPE_KEYS_MAX = 16
PAGE_SIZE_MAX = 1000
TOP_K_MAX = 100
EVENTS_MAX = 1000
FACTS_MAX = 100

ScopeArg = Annotated[dict[str, str], Field(
    min_length=1, max_length=SCOPE_KEYS_MAX,
    description="Exact scope: a JSON object of 1-16 string keys (1-128 characters) to string values "
                "(1-1024 characters), e.g. {\"user_id\": \"u1\"}. Matched exactly, never as a prefix.")]
NameArg = Annotated[str, Field(description="The memory's name (a uuid), as create_memory or retrieve_memories "
                                           "returned it.", min_length=1, max_length=64)]
FactArg = Annotated[str, Field(min_length=1, max_length=FACT_MAX,
                               description=f"The fact, in natural language: 1-{FACT_MAX} characters, not blank.")]
TopicsArg = Annotated[list[Annotated[str, Field(min_length=1, max_length=TOPIC_LABEL_MAX)]] | None, Field(
    max_length=TOPICS_MAX, description=f"Topic labels (at most {TOPICS_MAX}, each 1-{TOPIC_LABEL_MAX} characters), "
                                       "e.g. USER_PERSONAL_INFO, USER_PREFERENCES.")]
MetadataArg = Annotated[dict[str, Any] | None, Field(description="Metadata: a JSON object of at most 64 KiB.")]
TtlArg = Annotated[float | None, Field(gt=0, description="Seconds until the memory expires (default: never).")]
ExpectedRevisionArg = Annotated[int | None, Field(
    ge=1, description="Compare-and-set: change the memory only while it is still at this revision (as read); "
                      "otherwise the call fails with [MB003] and nothing is written.")]
ContextArg = Annotated[str | None, Field(
    min_length=1, max_length=FACT_MAX,
    description="Optional: the conversation text around the fact where it was said (e.g. the turn before it). "
                "Searched with the fact so later questions find it, never returned.")]


def _jsonable(value: Any) -> Any:
    # dataclasses of membank.models as JSON (datetimes ISO 8601, uuids text)
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value):
        value = asdict(value)
    return json.loads(json.dumps(value, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v)))


def _ttl(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


class MembankTools:
    """The tools, bound to one MemoryBank; ``scope`` is filled in by the server when it is fixed."""

    def __init__(self, bank: Any, *, decompose: str | None = None) -> None:
        """Serve ``bank`` (a ``membank.MemoryBank``); ``decompose`` splits compound queries (see retrieve_memories)."""
        self.bank = bank
        self.decompose = decompose

    def create_memory(self, fact: FactArg, topics: TopicsArg = None, metadata: MetadataArg = None,
                      ttl_seconds: TtlArg = None, context: ContextArg = None, *, scope: ScopeArg) -> dict[str, Any]:
        """Store one fact as a memory of the scope and return it (name, fact, topics, revision, times).

        ``context`` is the text around the fact where it was said; it is searched, never returned.
        """
        return _jsonable(self.bank.create_memory(scope, fact, topics=topics, metadata=metadata,
                                                 ttl=_ttl(ttl_seconds), context=context))

    def retrieve_memories(self, query: Annotated[str | None, Field(
                              max_length=FACT_MAX,
                              description="What to look for, in natural language. Empty or omitted: no query, "
                                          "the scope's memories (at most top_k), oldest first.")] = None,
                          top_k: Annotated[int, Field(ge=1, le=TOP_K_MAX, description="Results (1-100).")] = 3,
                          min_similarity: Annotated[float | None, Field(
                              ge=-1, le=1, description="Keep results whose cosine similarity is at least this "
                                                       "(similarities of the default model are compressed: "
                                                       "prefer min_relevance).")] = None,
                          min_relevance: Annotated[float | None, Field(
                              ge=0, le=1, description="Return no result when none has a relevance (estimated "
                                                      "probability, 0-1, that the memory answers the query) of at "
                                                      "least this; below_threshold then counts them. Omitted: the "
                                                      "top_k whatever they are.")] = None,
                          rerank: Annotated[bool, Field(
                              description="Order the results by the re-ranker (a second pass over the top 50: "
                                          "higher recall, score is then its probability).")] = False,
                          *, scope: ScopeArg) -> dict[str, Any]:
        """RetrieveMemories: the scope's memories closest to the query (vectors and full text, fused by RRF).

        Without a query (empty or omitted): the scope's memories, at most top_k, oldest first. Each result has the memory, its score, similarity (null and degraded
        true while it has no vector yet), relevance and matched signals. With min_relevance, "below_threshold"
        says how many results it left out: no results and below_threshold > 0 means nothing relevant is stored.
        With rerank, the re-ranker orders them (retrieve_memories' second pass, docs/retrieval.md).
        """
        results = self.bank.retrieve_memories(scope, query, top_k=top_k, min_similarity=min_similarity,
                                              min_relevance=min_relevance, rerank=rerank or None,
                                              **({"decompose": self.decompose} if self.decompose else {}))
        found = {"results": [{**_jsonable(r.memory), **{k: v for k, v in _jsonable(r).items() if k != "memory"}}
                             for r in results]}
        return found if min_relevance is None else {**found, "below_threshold": results.below_threshold}

    def list_memories(self, page_size: Annotated[int, Field(ge=1, le=PAGE_SIZE_MAX,
                                                            description="Memories per page (1-1000).")] = 100,
                      page_token: Annotated[str | None, Field(description="next_page_token of the previous page.")
                                            ] = None,
                      *, scope: ScopeArg) -> dict[str, Any]:
        """One page of the scope's live memories, oldest first, and the token of the next page (null at the end)."""
        page = self.bank.list_memories(scope, page_size=page_size, page_token=page_token)
        return {"memories": [_jsonable(m) for m in page.memories], "next_page_token": page.next_page_token}

    def update_memory(self, name: NameArg, fact: Annotated[str | None, Field(
                          min_length=1, max_length=FACT_MAX, description="New fact (1-32768 characters).")] = None,
                      topics: TopicsArg = None, metadata: MetadataArg = None, ttl_seconds: TtlArg = None,
                      expected_revision: ExpectedRevisionArg = None, *, scope: ScopeArg) -> dict[str, Any]:
        """Change only the given fields of a memory of the scope; writes one revision; returns the memory.

        With expected_revision, only while the memory is still at that revision (else [MB003], nothing written).
        """
        return _jsonable(self.bank.update_memory(name, fact=fact, topics=topics, metadata=metadata,
                                                 ttl=_ttl(ttl_seconds), scope=scope,
                                                 expected_revision=expected_revision))

    def delete_memory(self, name: NameArg, expected_revision: ExpectedRevisionArg = None, *,
                      scope: ScopeArg) -> dict[str, Any]:
        """Delete a memory of the scope (its revisions stay readable); returns it as it was, with deleted: true.

        With expected_revision, only while the memory is still at that revision (else [MB003], nothing deleted).
        """
        return {"deleted": True, **_jsonable(self.bank.delete_memory(name, scope=scope,
                                                                     expected_revision=expected_revision))}

    def generate_memories(self, events: Annotated[list[dict[str, Any]] | None, Field(
                              max_length=EVENTS_MAX,
                              description="Conversation events, at most 1000: {\"event_id\", \"author\", \"text\" "
                                          "(<= 32768 characters), \"timestamp\" (ISO 8601 with a zone)}.")] = None,
                          session_id: Annotated[str | None, Field(
                              min_length=1, max_length=1024,
                              description="Generate from this session's stored events (with events: append "
                                          "them to it first).")] = None,
                          facts: Annotated[list[Annotated[str, Field(min_length=1, max_length=FACT_MAX)]] | None,
                                           Field(max_length=FACTS_MAX,
                                                 description="Facts given directly (at most 100): no extraction, "
                                                             "only consolidation.")] = None,
                          wait: Annotated[bool, Field(description="Run the operation now and return its result "
                                                                  "(false: return its name; a `membank worker` "
                                                                  "runs it).")] = True,
                          *, scope: ScopeArg) -> dict[str, Any]:
        """GenerateMemories: turn events (or facts) into the scope's memories: CREATED, UPDATED or DELETED.

        One source: events, session_id, or facts.
        """
        if wait:  # runs the jobs here: a login that may not is refused before anything is written
            self.bank._require_job_role()
        pending = self.bank.generate_memories(scope, events=events, session_id=session_id, facts=facts)
        if not wait:
            return {"name": str(pending.name), "done": False}
        return _jsonable(pending.wait(3600, process=True))

    def add_messages(self, messages: Annotated[list[dict[str, Any]], Field(
                         min_length=1, max_length=EVENTS_MAX,
                         description="OpenAI-style chat messages, at most 1000: {\"role\": user | assistant | system "
                                     "| developer | tool, \"content\": text or [{\"type\": \"text\", \"text\"}, ...]}, "
                                     "optionally \"id\" and \"timestamp\" (ISO 8601).")],
                     session_id: Annotated[str | None, Field(
                         min_length=1, max_length=200,
                         description="The session they belong to (default \"default\").")] = None,
                     wait: Annotated[bool, Field(description="Run the operation now and return its result "
                                                             "(false: return its name; a `membank worker` "
                                                             "runs it).")] = True,
                     *, scope: ScopeArg) -> dict[str, Any]:
        """Add chat messages (as mem0's add) and turn them into the scope's memories (GenerateMemories).

        System and tool messages are stored but not extracted from; sending the same messages again adds nothing.
        """
        if wait:  # runs the jobs here: a login that may not is refused before anything is written
            self.bank._require_job_role()
        pending = self.bank.add(messages, scope=scope, session_id=session_id)
        added = _jsonable(pending.added)
        if not wait:
            return {"name": str(pending.name), "done": False, **added}
        return {**_jsonable(pending.wait(3600, process=True)), **added}

    def get_operation(self, name: Annotated[str, Field(min_length=1, max_length=64,
                                                       description="The operation's name (a uuid).")],
                      *, scope: ScopeArg) -> dict[str, Any]:
        """A GenerateMemories operation of the scope: done, error, generated memories, rejected items."""
        return _jsonable(self.bank.get_operation(name, scope=scope))

    def retrieve_profiles(self, *, scope: ScopeArg) -> dict[str, Any]:
        """The scope's profiles (structured facts about the user)."""
        return {"profiles": _jsonable(self.bank.retrieve_profiles(scope))}


TOOLS = ["create_memory", "retrieve_memories", "list_memories", "update_memory", "delete_memory",
         "generate_memories", "add_messages", "get_operation", "retrieve_profiles"]


def _bind(method: Callable[..., Any], fixed_scope: dict[str, str] | None) -> Callable[..., Any]:
    import functools
    import inspect

    sig = inspect.signature(method)
    if fixed_scope is None:  # per call: scope is a required argument of every tool
        @functools.wraps(method)
        def per_call(**kwargs: Any) -> Any:
            return _call(method, kwargs)

        per_call.__signature__ = sig  # type: ignore[attr-defined]
        return per_call

    @functools.wraps(method)
    def fixed(**kwargs: Any) -> Any:
        # the fixed scope always wins: it is set last, after whatever arrived
        return _call(method, {**kwargs, "scope": fixed_scope})

    fixed.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.name != "scope"])
    return fixed


def _call(method: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError

    from membank import errors

    try:
        return method(**kwargs)
    except errors.MembankError as err:
        code = f"[{err.sqlstate}] " if err.sqlstate else ""
        raise ToolError(f"{code}{err.message}" + (f" (hint: {err.hint})" if err.hint else "")) from None


MISSING_SDK = "membank mcp needs the mcp SDK 2.x (the [mcp] extra), which is not installed"
INSTALL_HINT = "in the membank checkout run .venv/bin/pip install -e '.[mcp]'"


def _sdk() -> Any:
    """The SDK's MCPServer class; SetupError (one line with the install hint) when the [mcp] extra is missing."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        from membank import errors

        raise errors.SetupError(MISSING_SDK, hint=INSTALL_HINT) from None
    return MCPServer


def validation_message(err: Any) -> str:
    """One line naming each refused argument: ``argument top_k: Input should be ...`` (a pydantic ValidationError)."""
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e.get("loc", ())) or "arguments"
        parts.append(f"argument {where}: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


def unknown_arguments_message(tool: str, unknown: list[str], known: list[str], fixed_scope: bool) -> str:
    """One line naming each argument ``tool`` does not take, and the ones it does."""
    parts = []
    for name in unknown:
        why = ("this server's scope is fixed (membank mcp --scope)" if name == "scope" and fixed_scope
               else f"{tool} takes {', '.join(known) if known else 'no arguments'}")
        parts.append(f"argument {name}: not an argument of {tool}: {why}")
    return "; ".join(parts)


def _server_class(base: Any) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    class MembankServer(base):
        """The SDK's server, strict about arguments: every input schema has ``additionalProperties: false``, an
        argument a tool does not take is refused naming it, and argument errors are one line naming the argument
        (no pydantic text or URL)."""

        tool_arguments: dict[str, list[str]] = {}
        fixed_scope = False

        async def list_tools(self) -> Any:
            tools = await super().list_tools()
            for tool in tools:
                tool.input_schema["additionalProperties"] = False
            return tools

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            known = self.tool_arguments.get(name)
            unknown = sorted(set(arguments or {}) - set(known)) if known is not None else []
            if unknown:
                raise ToolError(f"Error executing tool {name}: "
                                + unknown_arguments_message(name, unknown, known, self.fixed_scope))
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as err:
                if isinstance(err.__cause__, ValidationError):
                    raise ToolError(f"Error executing tool {name}: {validation_message(err.__cause__)}"
                                    ) from err.__cause__
                raise

    return MembankServer


def build_server(bank: Any, *, scope: dict[str, str] | None = None, decompose: str | None = None) -> Any:
    """Return an ``mcp`` MCPServer whose tools call ``bank``; ``scope`` fixes the scope of every call.

    ``decompose`` (``"rules"``, ``"model:<provider>"``, ...) splits compound
    retrieve_memories queries into sub-queries (one embedding call for all);
    the operator chooses it, never the model.

    The server reports membank's version. Raises SetupError naming the extra
    when the ``mcp`` SDK (v2) is not installed.
    """
    import inspect

    from membank import package_version

    server_class = _server_class(_sdk())
    where = (f"Every tool works in the fixed scope {json.dumps(scope)}." if scope is not None
             else "Every tool takes the exact scope it works in.")
    server = server_class(
        "membank",
        version=package_version(),
        instructions="Long-term memory for this agent, kept in PostgreSQL: store facts (create_memory), find "
                     "them again (retrieve_memories), turn conversations into memories (generate_memories). "
                     + where)
    tools = MembankTools(bank, decompose=decompose)
    server.fixed_scope = scope is not None
    server.tool_arguments = {}
    for name in TOOLS:
        method = getattr(tools, name)
        bound = _bind(method, scope)
        server.tool_arguments[name] = list(inspect.signature(bound).parameters)
        server.add_tool(bound, name=name, description=method.__doc__.strip())
    return server


def _check_port_free(port: int) -> None:
    """Raise SetupError naming ``port`` when 127.0.0.1:``port`` cannot be listened on (bound as uvicorn binds it)."""
    import socket

    from membank import errors

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise errors.SetupError(f"--http {port}: cannot listen on 127.0.0.1:{port} ({err.strerror})",
                                    hint=f"choose another port, or stop what listens there (ss -ltnp 'sport = :{port}')"
                                    ) from None


def run(*, scope: dict[str, str] | None, http_port: int | None, decompose: str | None = None) -> None:
    """Serve over stdio, or over streamable HTTP on 127.0.0.1:``http_port`` (path /mcp), until stopped.

    Raises SetupError before connecting when the [mcp] extra is missing, or
    when ``http_port`` is taken (one line, before the bank opens and before
    uvicorn logs anything).
    """
    from membank.client import MemoryBank

    _sdk()
    if http_port is not None:
        _check_port_free(http_port)
    with MemoryBank(max_size=2) as bank:
        server = build_server(bank, scope=scope, decompose=decompose)
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=http_port)


def _command() -> Any:
    import click

    def scope_json(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"not valid JSON ({err.msg}); e.g. '{{\"user_id\": \"u1\"}}'") from None
        if not isinstance(parsed, dict):
            raise click.BadParameter("must be a JSON object, e.g. '{\"user_id\": \"u1\"}'")
        return parsed

    @click.command("mcp")
    @click.option("--scope", callback=scope_json,
                  help="Fix every call to this exact scope (JSON object); tools then take no scope argument. "
                       "Without it each call names its scope.")
    @click.option("--http", "http_port", type=click.IntRange(1, 65535), metavar="PORT",
                  help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio.")
    @click.option("--decompose", metavar="METHOD",
                  help="Split compound retrieve_memories queries into sub-queries: rules, model:<provider>, or "
                       "in_database:<model_id> (all embedded in one call).")
    def mcp(scope: dict[str, str] | None, http_port: int | None, decompose: str | None) -> None:
        """Serve membank to agents over the Model Context Protocol (stdio or HTTP).

        \b
        membank mcp --scope '{"user_id":"u1"}'               # stdio, one user's memories
        membank mcp --scope '{"user_id":"u1"}' --http 8765   # http://127.0.0.1:8765/mcp

        With --scope, no argument can reach another scope; without it every
        tool takes a required scope argument (for a trusted client). Run
        `membank worker` beside it: the worker embeds the facts the tools store.
        """
        run(scope=scope, http_port=http_port, decompose=decompose)

    return mcp


mcp = _command()
