"""The generation worker: carries the model calls of GenerateMemories operations.

SQL decides, the worker carries. In one transaction per job it claims the job
(``membank.claim_generation_jobs``, FOR UPDATE SKIP LOCKED); for a
consolidation it embeds the extracted facts (passage mode) and asks
``membank.prepare_consolidation`` for the prompt with each fact's candidate
memories; it calls the provider and hands the raw reply to
``membank.complete_generation_job``, which validates and applies it. When the
candidates changed meanwhile, the database answers ``replan`` and the worker
prepares and asks again, still in the same transaction (bounded in SQL).
A worker that dies mid-job holds nothing: its transaction rolls back and the
next worker claims the job. A failed provider or embedder call is recorded
with ``membank.fail_generation_job`` (exponential backoff, ``max_attempts``
attempts: ``MEMBANK_MODEL_ATTEMPTS``, default 2, then the operation fails
visibly); a request the provider refuses for good (``GenerationError.retryable``
is False: HTTP 400, 401, 403, 404, 422, or a 5xx that says the request is
invalid) fails the operation at once. An operation's batches (extraction
batches, then consolidation batches) are one job that answers ``next`` until
the last.

Each provider call runs in a daemon thread that the job waits for: with a
``deadline`` (``PendingOperation.wait``) a call still running at it is
abandoned (``CallAbandoned``), the job's transaction rolls back and the job
stays due for the next worker; Ctrl-C is never held up by a call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from membank.embedding import Embedder
from membank.embedding.binary import Float4Matrix, Float4MatrixDumper
from membank import errors, settings
from membank.generation.base import CallAbandoned, Provider
from membank.worker import GENERATION_JOB_FUNCTIONS, require_job_role

log = logging.getLogger("membank.generation")
CHANNEL = "membank_generation_jobs"


class GenerationWorker:
    """Runs generation jobs with one ``Provider`` and one ``Embedder`` over one connection to ``url``."""

    def __init__(self, url: str, provider: Provider, embedder: Embedder, *, max_attempts: int | None = None) -> None:
        """Connect lazily to ``url``; ``provider`` answers prompts, ``embedder`` embeds facts for candidates.

        ``max_attempts`` (1..5, default ``MEMBANK_MODEL_ATTEMPTS``, else 2):
        the attempts a job gets before its operation fails.
        """
        self.url = url
        self.provider = provider
        self.embedder = embedder
        self.max_attempts = settings.model_attempts(max_attempts)
        self.model_calls = 0
        self.last_error: str | None = None
        """The error of the last failed job this worker ran (None until one fails)."""
        self.last_exception: BaseException | None = None
        """The exception of the last failed job (its ``hint`` says what to change)."""
        self._conn: psycopg.Connection | None = None
        self._finished = False  # the last job run finished its operation (complete_generation_job said 'done')

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.url)
            try:
                require_job_role(conn, GENERATION_JOB_FUNCTIONS)
            except errors.PermissionDeniedError:
                conn.close()
                raise
            self._conn = conn
            self._conn.adapters.register_dumper(Float4Matrix, Float4MatrixDumper)
            self._conn.execute("set timezone to 'UTC'")
            self._conn.commit()
        return self._conn

    def configure(self) -> None:
        """Connect (done before the first claim anyway); raise PermissionDeniedError (42501) unless the login may claim.

        Generation jobs carry any scope's events, so claiming them needs
        membank_worker or membank_admin (``membank.worker.require_job_role``).
        """
        self._connection()

    def close(self) -> None:
        """Close the worker's connection."""
        if self._conn is not None:
            self._conn.close()

    def _ask(self, job: tuple, deadline: float | None) -> str:
        job_id, _, _, _, _, prompt, schema, request = job
        self.model_calls += 1
        return _bounded(lambda: self.provider.complete(prompt, schema, input=request), deadline,
                        f"the call to {self.provider.model_id}{_at(self.provider)}")

    def _prepare(self, conn: psycopg.Connection, job_id: int, texts: list[str] | None) -> tuple:
        if texts is None or not texts:  # a re-plan reuses the stored vectors; profile fields alone need none
            return conn.execute("select * from membank.prepare_consolidation(%s)", (job_id,)).fetchone()
        # Binary float4[] (embedding/binary.py): as a list of floats, sending it cost more than planning the facts.
        vectors = Float4Matrix(self.embedder.embed_passages(texts))
        return conn.execute(
            "select * from membank.prepare_consolidation(job_id => %s, embeddings => %b::real[],"
            " embedding_model => %s)", (job_id, vectors, self.embedder.model_id)).fetchone()

    def process_job(self, operation_name: str | None = None, *, deadline: float | None = None) -> int:
        """Claim and run one due job (only ``operation_name``'s when given); return 1, or 0 when nothing is due.

        ``deadline`` (a ``time.monotonic()`` value): a provider call still
        running then is abandoned and CallAbandoned raised; the job's
        transaction rolls back, so the job stays due and uncounted. Raises
        psycopg.OperationalError when the connection is lost (the job is
        released by the server; ``run`` reconnects).
        """
        conn = self._connection()
        with conn.transaction():
            try:
                job = conn.execute("select * from membank.claim_generation_jobs(1, %s::uuid)",
                                   (operation_name,)).fetchone()
            except psycopg.errors.InsufficientPrivilege as err:
                # a login bound to scopes (refuse_bound_role): membank's PermissionDeniedError, as everywhere
                raise errors.from_psycopg(err) from None
            if job is None:
                return 0
            job_id, operation, stage = job[0], job[1], job[2]
            try:
                with conn.transaction():  # a savepoint: a database error here must not lose the claim
                    status = "replan"
                    if stage == "CONSOLIDATE":
                        job = self._prepare(conn, job_id, list(job[4]) if job[4] is not None else None)
                    while status == "replan":
                        # PostgreSQL text cannot hold U+0000; the database strips its \u0000 escapes.
                        reply = self._ask(job, deadline).replace("\x00", "")
                        status = conn.execute("select membank.complete_generation_job(%s, %s)",
                                              (job_id, reply)).fetchone()[0]
                        if status == "replan":
                            log.info("operation %s: candidates changed, re-planning", operation)
                            job = self._prepare(conn, job_id, None)
            except (psycopg.OperationalError, CallAbandoned):
                raise
            except Exception as err:  # provider, embedder or a rejected call: recorded, retried with backoff
                log.warning("operation %s (%s, attempt %s of %s) failed: %s", operation, stage, job[3],
                            self.max_attempts, err)
                self.last_error = str(err) or repr(err)
                self.last_exception = err
                # False: a request that will never succeed, or the last attempt this worker allows.
                retryable = getattr(err, "retryable", True) and job[3] < self.max_attempts
                failed = conn.execute("select membank.fail_generation_job(%s, %s, %s)",
                                      (job_id, getattr(err, "message", None) or str(err) or repr(err),
                                       retryable)).fetchone()
                if failed[0]:
                    log.error("operation %s failed after %s attempts", operation, job[3])
                return 1
            log.debug("operation %s: %s %s", operation, stage, status)
        self._finished = status == "done"
        return 1

    def process_pending(self, *, limit: int | None = None, progress: Callable[[int], None] | None = None,
                        operation_name: str | None = None, deadline: float | None = None) -> int:
        """Run due jobs until none is left (or ``limit`` jobs); return how many ran.

        With ``operation_name``, only that operation's jobs: running one
        operation here never carries another scope's work with this provider.
        With ``deadline`` (``time.monotonic()``), raises CallAbandoned when a
        provider call is still running then (``process_job``).
        """
        done = 0
        while limit is None or done < limit:
            self._finished = False
            if self.process_job(operation_name, deadline=deadline) == 0:
                break
            done += 1
            if progress:
                progress(1)
            if operation_name is not None and self._finished:
                break  # the operation is done: no claim left to find (on Citus a transaction of its own)
        return done


def _at(provider: Any) -> str:
    endpoint = getattr(provider, "endpoint", None)
    return f" at {endpoint}" if endpoint else ""


def _bounded(call: Callable[[], str], deadline: float | None, what: str) -> str:
    """Run ``call`` in a daemon thread and return its result, or raise CallAbandoned at ``deadline``.

    The thread is a daemon so that an abandoned call (still blocked in its
    HTTP request until the provider's own timeout) never holds up the
    process's exit; its result or error is dropped. A KeyboardInterrupt
    reaches the waiting thread at once.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["reply"] = call()
        except BaseException as err:  # handed to the waiting thread
            outcome["error"] = err
        finally:
            finished.set()

    started = time.monotonic()
    if deadline is not None and started >= deadline:
        raise CallAbandoned(f"{what} was not started: the deadline had passed (the job stays due)")
    threading.Thread(target=run, name="membank-provider-call", daemon=True).start()
    while not finished.wait(0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))):
        if deadline is not None and time.monotonic() >= deadline:
            raise CallAbandoned(f"{what} was still running after {time.monotonic() - started:.1f} s: abandoned "
                                "(the job stays due for the next worker)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["reply"]
