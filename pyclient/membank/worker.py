"""The embedding worker: carries the embedding calls that the database queues.

SQL decides, the worker carries: a trigger queues a job when a fact changes;
the worker claims due jobs (``membank.claim_embedding_jobs``, FOR UPDATE SKIP
LOCKED) inside a transaction, embeds the facts in passage mode, and stores
the vectors (``membank.store_embeddings``) before it commits. A worker that
dies mid-batch holds nothing afterwards: its transaction rolls back and the
jobs are claimed by the next worker. A failed model call is recorded with
``membank.fail_embedding_jobs`` (retried with exponential backoff, five
attempts), job by job: a fact the embedder or the bank refuses fails its own
job, never the batch it was claimed with. ``run()`` sleeps on LISTEN
membank_embedding_jobs with a poll fallback. Each loop also runs the IngestEvents sweep
(``membank.generate_due_streams``): streams whose idle_duration,
fixed_interval or 24 h flush came due get their GenerateMemories operation
queued (decided in SQL; due and queued commit together).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from membank import errors
from membank.embedding import Embedder

log = logging.getLogger("membank.worker")
CHANNEL = "membank_embedding_jobs"


def vector_literal(vector: list[float]) -> str:
    """Format a vector as pgvector text, e.g. ``[0.1,-0.2]`` (repr keeps every float exact)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


# What running each queue in process calls (db/privileges.sql grants them to membank_worker and membank_admin).
EMBEDDING_JOB_FUNCTIONS = ("membank.configure_embedding(text, integer)", "membank.claim_embedding_jobs(integer)")
GENERATION_JOB_FUNCTIONS = ("membank.claim_generation_jobs(integer, uuid)",)


def require_job_role(conn: psycopg.Connection, functions: tuple[str, ...]) -> None:
    """Raise PermissionDeniedError (42501) unless the login may call every one of ``functions``.

    A claimed job carries the raw text of whatever scope it belongs to, so
    only membank_worker and membank_admin may claim (docs/operations.md). The
    in-process workers check it when they connect, before they claim or
    declare anything, and the paths that write and then run jobs in process
    (``membank generate``, mem0's ``Memory(process=True)``, the LangGraph
    store's ``embed_in_process``) connect them before they write: a login
    holding only membank_writer gets one error naming the role it lacks, and
    nothing is written. Reads the catalog only (``has_function_privilege``).
    """
    refused = [f for f in functions
               if not conn.execute("select has_function_privilege(%s, 'execute')", (f,)).fetchone()[0]]
    conn.rollback()
    if refused:
        raise errors.PermissionDeniedError(
            f"this login ({conn.info.user}) may not run membank's jobs in process: it may not call "
            + ", ".join(refused),
            sqlstate="42501",
            hint="claiming a job reads any scope's text, so it needs membank_worker or membank_admin: grant one to "
                 "this login, or queue the work here (process=False, membank generate --no-wait) and run "
                 "`membank worker` as a login that holds membank_worker")


class EmbeddingWorker:
    """Embeds queued memories with one ``Embedder`` over one connection to ``url``."""

    def __init__(self, url: str, embedder: Embedder, *, batch_size: int = 64, generation: Any = None,
                 retention_interval: float | None = None, pass_limit: int = 256,
                 generations_per_pass: int = 4, due_rebuild_interval: float | None = None) -> None:
        """Connect to ``url``; ``batch_size`` (1..1000) facts are embedded per model call.

        ``run()`` works in passes of at most ``pass_limit`` embedding jobs
        and ``generations_per_pass`` generation jobs, so neither queue waits
        for the other to empty (a steady stream of writes never starves
        GenerateMemories).

        ``generation``: a ``membank.generation.worker.GenerationWorker`` whose
        jobs ``run()`` also carries (woken by its own channel), or None.
        ``retention_interval``: every so many seconds ``run()`` also calls
        ``purge_expired_memories`` and ``apply_retention`` (None: never).
        ``due_rebuild_interval``: every so many seconds ``run()`` also
        rebuilds a Citus coordinator's index of due work from the shards
        (``membank_private.rebuild_due_work()``), so that jobs and expiries
        written through a worker node's own connection are found (None: the
        ``MEMBANK_DUE_REBUILD_INTERVAL`` environment variable, else 600 s;
        0 or less: never). It reads every shard; on one server it is a no-op.
        It needs membank_admin: without it, it is skipped (see ``rebuild_due_work``).
        """
        self.retention_interval = retention_interval
        self._next_retention = 0.0
        if due_rebuild_interval is None:
            due_rebuild_interval = float(os.environ.get("MEMBANK_DUE_REBUILD_INTERVAL") or 600)
        self.due_rebuild_interval = due_rebuild_interval if due_rebuild_interval > 0 else None
        self._next_due_rebuild = 0.0
        self.url = url
        self.embedder = embedder
        self.batch_size = batch_size
        self.generation = generation
        self.pass_limit = pass_limit
        self.generations_per_pass = generations_per_pass
        self._conn: psycopg.Connection | None = None
        self.sweep_streams = True
        """Whether ``run()`` calls the IngestEvents sweep (off after a 42501: the role may not)."""

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.url)
            conn.execute("set timezone to 'UTC'")
            conn.commit()
            try:
                require_job_role(conn, EMBEDDING_JOB_FUNCTIONS)
            except errors.PermissionDeniedError:
                conn.close()
                raise
            self._declare_model(conn)
            self._conn = conn
        return self._conn

    def _declare_model(self, conn: psycopg.Connection) -> None:
        try:
            with conn.transaction():
                conn.execute("select membank.configure_embedding(model_id => %s, dimension => %s)",
                             (self.embedder.model_id, self.embedder.dimension))
        except psycopg.Error as err:
            conn.close()
            raise errors.from_psycopg(err) from None

    def configure(self) -> None:
        """Connect and declare this worker's model to the bank (done before the first batch anyway).

        Raises ConflictError (MB010) when the bank holds vectors of another
        model or dimension: re-embed explicitly with ``membank reembed``.
        """
        self._connection()

    def close(self) -> None:
        """Close the worker's connection."""
        if self._conn is not None:
            self._conn.close()
        if self.generation is not None:
            self.generation.close()

    def process_batch(self) -> int:
        """Claim, embed and store one batch; return how many jobs it claimed (0: nothing due).

        One bad item fails its own job only: when the embedder refuses the
        batch, its halves are embedded again (down to single facts), and
        when the bank refuses a vector (22023: NaN, zero norm...), the
        vectors are stored one by one; each job that still fails is recorded
        with its own error (``fail_embedding_jobs``) and the others are
        stored. Blank facts never reach the embedder: the claim fails them
        (SQL's one rule, ``membank_private.is_blank``).
        """
        conn = self._connection()
        # The claim is a lease, committed before the model is called: no lock is
        # held while embedding (a delete of a claimed memory never waits for it).
        with conn.transaction():
            jobs = conn.execute("select memory_name, memory_fact, fact_md5 from membank.claim_embedding_jobs(%s)",
                                (self.batch_size,)).fetchall()
        if not jobs:
            return 0
        embedded, failed = self._embed_each([(str(j[0]), str(j[2]), j[1]) for j in jobs])
        if embedded:
            failed += self._store(conn, embedded)
        # One call per distinct error (a provider that is down gives every job the same one).
        by_error: dict[str, list[tuple[str, str]]] = {}
        for name, md5, error in failed:
            by_error.setdefault(error, []).append((name, md5))
        for error, items in by_error.items():
            with conn.transaction():
                conn.execute("select membank.fail_embedding_jobs(%s, %s, %s)",
                             ([n for n, _ in items], [m for _, m in items], error))
        return len(jobs)

    def _embed_each(self, jobs: list[tuple[str, str, str]]) -> tuple[list[tuple], list[tuple]]:
        # ([(name, md5, vector)], [(name, md5, error)]): a failed call is split in halves and tried again,
        # so an item the embedder refuses fails alone (a provider that is down costs 2n - 1 failed calls).
        try:
            vectors = self.embedder.embed_passages([j[2] for j in jobs])
            embedded = [(name, md5, vector) for (name, md5, _), vector in zip(jobs, vectors, strict=True)]
        except Exception as err:  # the provider failed: record it, retry later
            if len(jobs) == 1:
                log.warning("embedding memory %s failed: %s", jobs[0][0], err)
                return [], [(jobs[0][0], jobs[0][1], repr(err))]
            half = len(jobs) // 2
            first, second = self._embed_each(jobs[:half]), self._embed_each(jobs[half:])
            return first[0] + second[0], first[1] + second[1]
        return embedded, []

    def _store(self, conn: psycopg.Connection, items: list[tuple]) -> list[tuple]:
        # Store the vectors in one call; when the bank refuses one (22023), one call per vector.
        # Returns [(name, md5, error)] of those it refused.
        try:
            self._store_vectors(conn, items)
            return []
        except psycopg.errors.InvalidParameterValue as err:
            # A degenerate vector (NaN, infinite, zero norm): its job fails visibly and is retried.
            log.warning("embedder returned vectors the bank refused: %s", err.diag.message_primary)
            if len(items) == 1:
                return [(items[0][0], items[0][1], err.diag.message_primary)]
        failed = []
        for item in items:
            failed += self._store(conn, [item])
        return failed

    def _store_vectors(self, conn: psycopg.Connection, items: list[tuple]) -> None:
        with conn.transaction():
            conn.execute(
                "select membank.store_embeddings(model_id => %s, dimension => %s, memory_names => %s,"
                " fact_md5s => %s, embeddings => %s)",
                (self.embedder.model_id, self.embedder.dimension, [i[0] for i in items], [i[1] for i in items],
                 [vector_literal(i[2]) for i in items]))

    def process_pending(self, *, limit: int | None = None,
                        progress: Callable[[int], None] | None = None) -> int:
        """Process due jobs until none is left (or ``limit`` jobs); return how many were processed.

        ``progress(n)`` is called after each batch with its size.
        """
        done = 0
        while limit is None or done < limit:
            n = self.process_batch()
            if n == 0:
                break
            done += n
            if progress:
                progress(n)
        return done

    def generate_due_streams(self, *, now: Any = None,
                             before_commit: Callable[[list[tuple]], None] | None = None) -> list[tuple]:
        """Run the IngestEvents sweep once in one transaction; return the rows of the operations it queued.

        ``now`` (default the database clock) is the instant triggers are
        judged at. ``before_commit(rows)`` runs inside the transaction, after
        SQL queued the operations and moved the streams' watermarks and before
        the commit (tests crash a worker there: both roll back together).
        A role that may not sweep (42501) turns the sweep off with a warning.
        """
        conn = self._connection()
        try:
            with conn.transaction():
                rows = conn.execute("select * from membank.generate_due_streams(now => %s::timestamptz)",
                                    (now,)).fetchall()
                if before_commit is not None:
                    before_commit(rows)
        except psycopg.errors.InsufficientPrivilege as err:
            log.warning("IngestEvents sweep off: %s (grant membank_worker to the worker's role)",
                        err.diag.message_primary)
            self.sweep_streams = False
            return []
        if rows:
            log.info("IngestEvents: queued %d operations for due streams", len(rows))
        return rows

    def run_retention(self) -> dict[str, Any]:
        """Purge expired memories and apply retention now, on a connection of its own (the procedures commit).

        Returns ``{"expired": n, "removed": {...}}``, or ``{"skipped": reason}``
        when this worker's role may not call them (they need membank_admin).
        """
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                purged = conn.execute("call membank.purge_expired_memories()").fetchone()[0]
                removed = conn.execute("call membank.apply_retention()").fetchone()[0]
        except psycopg.errors.InsufficientPrivilege as err:
            log.warning("retention skipped: %s (grant membank_admin to the worker's role)", err)
            return {"skipped": str(err)}
        return {"expired": purged, "removed": removed}

    def rebuild_due_work(self) -> int | None:
        """Rebuild the Citus coordinator's index of due work now; rows marked (0 on one server).

        Returns None, and stops trying on later intervals, when this
        worker's role may not on a Citus coordinator (it needs
        membank_admin), logged once as one WARNING line; on one server,
        where there is no index to rebuild, it returns 0 and logs nothing
        (a worker holding only membank_worker is the documented setup there).
        A worker node that does not answer is skipped by the server with a
        WARNING (logged).
        """
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: log.warning("due-work rebuild: %s", d.message_primary))
            try:
                return conn.execute("select membank_private.rebuild_due_work()").fetchone()[0]
            except psycopg.errors.InsufficientPrivilege as err:
                self.due_rebuild_interval = None
                citus = conn.execute("select exists (select from pg_catalog.pg_extension"
                                     " where extname = 'citus')").fetchone()[0]
                if not citus:
                    return 0
                log.warning("due-work index rebuild skipped: this role lacks membank_admin (%s); jobs and"
                            " expiries written through a worker node's own connection are found only when an"
                            " admin login runs `select membank_private.rebuild_due_work()` on the coordinator",
                            err.diag.message_primary)
                return None

    def _maybe_rebuild_due(self) -> None:
        if self.due_rebuild_interval is None or time.monotonic() < self._next_due_rebuild:
            return
        self._next_due_rebuild = time.monotonic() + self.due_rebuild_interval
        marked = self.rebuild_due_work()
        if marked:
            log.info("due-work index: %d scopes marked from the shards", marked)

    def run_pass(self) -> tuple[int, int]:
        """Run one fair pass; return ``(embedding jobs, generation jobs)`` it processed.

        Up to ``pass_limit`` embedding jobs (rounded up to whole batches),
        then up to ``generations_per_pass`` generation jobs, then the vectors
        of the memories those changed (within the same limit). ``run()``
        repeats passes without sleeping while either count is non-zero.
        """
        embedded = self.process_pending(limit=self.pass_limit)
        generated = 0
        if self.generation is not None:
            generated = self.generation.process_pending(limit=self.generations_per_pass)
            if generated:
                embedded += self.process_pending(limit=self.pass_limit)
        return embedded, generated

    def _maybe_retention(self) -> None:
        if self.retention_interval is None or time.monotonic() < self._next_retention:
            return
        self._next_retention = time.monotonic() + self.retention_interval
        result = self.run_retention()
        if "skipped" not in result:
            log.info("retention: %s", result)

    def run(self, *, poll_interval: float = 5.0, stop: threading.Event | None = None,
            max_backoff: float = 30.0) -> None:
        """Process jobs until ``stop`` is set: woken by NOTIFY, polling every ``poll_interval`` seconds.

        A lost connection (server restart, terminated backend) is logged and
        retried with exponential backoff up to ``max_backoff`` seconds; jobs
        that were claimed on it are released by the server and claimed again.
        So is MB040: a bank-wide row (the embedding configuration, held by an
        admin's open ``reembed``) that stayed busy for ``membank.lock_timeout``.
        """
        stop = stop or threading.Event()
        backoff = 0.5
        while not stop.is_set():
            try:
                self._listen_and_process(poll_interval, stop)
            except (psycopg.Error, errors.LockTimeoutError) as err:
                if not (isinstance(err, (psycopg.OperationalError, errors.LockTimeoutError))
                        or getattr(err, "sqlstate", None) == "MB040"):
                    raise
                log.warning("connection lost or bank busy (%s); retrying in %.1f s", err, backoff)
                self.close()
                self._conn = None
                stop.wait(backoff)
                backoff = min(backoff * 2, max_backoff)
            else:
                return

    def _listen_and_process(self, poll_interval: float, stop: threading.Event) -> None:
        with psycopg.connect(self.url, autocommit=True) as listener:
            listener.execute(f"listen {CHANNEL}")
            listener.execute("listen membank_generation_jobs")
            while not stop.is_set():
                self._maybe_rebuild_due()  # before the purge: expiries written on a worker node get purged too
                self._maybe_retention()
                if self.sweep_streams:
                    self.generate_due_streams()
                busy = any(self.run_pass())
                # Sleep until a trigger notifies or the poll interval passes
                # (the poll also picks up retries whose backoff has elapsed);
                # with work left, only read what was notified meanwhile.
                for _ in listener.notifies(timeout=0 if busy else poll_interval,
                                           stop_after=None if busy else 1):
                    pass
