"""SessionBuffer: the short-term tier in Valkey.

Per session, a token-bounded sliding window of recent turns and a rolling
summary of the turns trimmed off it. When the window grows past
``window_tokens``, the oldest turns are handed to the summarizer together
with the summary so far, and only when the new summary is stored are they
trimmed, in the same atomic step (summarize-before-trim). Appends and that
step are Lua scripts, so concurrent appends lose nothing: an append only
pushes on the right, a fold only pops on the left and only if the summary is
still the version it read (optimistic concurrency; a lease keeps a second
client from summarizing the same turns meanwhile, for economy only).

A session belongs to exactly one scope, and its keys are those of the
(scope, session) pair: two users who both call their session ``s1`` never
share a window or a summary. Keys (all of one (scope, session) share one
hash tag, so they live in one Valkey Cluster slot and every Lua script
touches one slot only)::

    <prefix>:{<scope id>:<session>}:turns     list of "seq|tokens|json", oldest first
    <prefix>:{<scope id>:<session>}:meta      hash: seq (last given), window_tokens
    <prefix>:{<scope id>:<session>}:summary   hash: text, tokens, first_seq, last_seq, version, update_time,
                                              carried_from
    <prefix>:{<scope id>:<session>}:ids       hash: event_id -> seq (a retried append stores nothing twice)
    <prefix>:{<scope id>:<session>}:lease     who is summarizing now

``<scope id>`` is the scope's id as the database computes it
(``md5(scope::jsonb::text)::uuid``, ``membank.scopes.scope_id``).
``prefix`` and ``session`` are percent-encoded (RFC 3986 unreserved
characters kept), so neither can contain ``:``, ``{`` or ``}`` and two
different (prefix, scope, session) triples never map to one key.

Keys of the layout before (``<prefix>:{<session>}:…``, no scope) are never
read: their hash tag holds no ``:``, so no new key equals one of them, and
they expire within their TTL (24 h by default) of their last write.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from membank import errors
from membank.scopes import scope_id as _scope_id
from membank.buffer.models import RollingSummary, SessionState, Turn, coerce_turn
from membank.buffer.server import ENV_VALKEY_URL, BufferUnavailableError, valkey_url
from membank.buffer.summarizer import Summarizer, get_summarizer
from membank.buffer.tokenizer import Tokenizer, get_tokenizer

log = logging.getLogger("membank.buffer")

DEFAULT_TTL_SECONDS = 24 * 3600
MAX_SESSION_ID_CHARS = 200  # as membank.append_events
MAX_PREFIX_CHARS = 64
_SUFFIXES = ("turns", "meta", "summary", "ids", "lease")

_APPEND = """
-- KEYS: turns, ids, meta, summary, lease
-- ARGV: ttl_ms, window limit (0: do not fold), lease token, lease_ms, then (event_id, tokens, body) per turn
-- Returns {seqs (negative: already stored), window tokens, fold}; fold is 0, or, when the window is over
-- the limit and this call took the session's lease, {window entries, summary hash} for the fold.
local ttl = tonumber(ARGV[1])
local seqs = {}
for i = 5, #ARGV, 3 do
  local seq = redis.call('HGET', KEYS[2], ARGV[i])
  if seq then
    seqs[#seqs + 1] = -tonumber(seq)
  else
    seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
    redis.call('HSET', KEYS[2], ARGV[i], seq)
    redis.call('RPUSH', KEYS[1], seq .. '|' .. ARGV[i + 1] .. '|' .. ARGV[i + 2])
    redis.call('HINCRBY', KEYS[3], 'window_tokens', tonumber(ARGV[i + 1]))
    seqs[#seqs + 1] = seq
  end
end
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
local window = tonumber(redis.call('HGET', KEYS[3], 'window_tokens') or '0')
local limit = tonumber(ARGV[2])
local fold = 0
if limit > 0 and window > limit and redis.call('SET', KEYS[5], ARGV[3], 'NX', 'PX', ARGV[4]) then
  fold = {redis.call('LRANGE', KEYS[1], 0, -1), redis.call('HGETALL', KEYS[4])}
end
return {seqs, window, fold}
"""

_FOLD = """
-- KEYS: turns, meta, summary, ids, lease
-- ARGV: version read, n, first seq, last seq, text, tokens, update_time, ttl_ms, lease token, window limit
-- Returns {status, window tokens}: status 1 written, 0 the summary changed since it was read, -1 window mismatch.
-- Releases the lease when the window now fits (the folding client has nothing left to do).
local function done(status)
  local left = tonumber(redis.call('HGET', KEYS[2], 'window_tokens') or '0')
  if status == 1 and left <= tonumber(ARGV[10]) and redis.call('GET', KEYS[5]) == ARGV[9] then
    redis.call('DEL', KEYS[5])
  end
  return {status, left}
end
local version = tonumber(redis.call('HGET', KEYS[3], 'version') or '0')
if version ~= tonumber(ARGV[1]) then return done(0) end
local n = tonumber(ARGV[2])
local first, last = tonumber(ARGV[3]), tonumber(ARGV[4])
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #head ~= n then return done(-1) end
local tokens = 0
for i, entry in ipairs(head) do
  local seq, tok = string.match(entry, '^(%d+)|(%d+)|')
  seq = tonumber(seq)
  if (i == 1 and seq ~= first) or (i == n and seq ~= last) then return done(-1) end
  tokens = tokens + tonumber(tok)
end
if n > 0 then
  redis.call('LTRIM', KEYS[1], n, -1)
  redis.call('HINCRBY', KEYS[2], 'window_tokens', -tokens)
  if tonumber(redis.call('HGET', KEYS[3], 'first_seq') or '0') == 0 then
    redis.call('HSET', KEYS[3], 'first_seq', first)
  end
  redis.call('HSET', KEYS[3], 'last_seq', last)
end
redis.call('HSET', KEYS[3], 'text', ARGV[5], 'tokens', ARGV[6], 'version', version + 1, 'update_time', ARGV[7])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[8])) end
return done(1)
"""

_CARRY = """
-- KEYS: summary; ARGV: text, tokens, update_time, carried_from, ttl_ms
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= 0 then return 0 end
redis.call('HSET', KEYS[1], 'text', ARGV[1], 'tokens', ARGV[2], 'version', 1, 'update_time', ARGV[3],
           'carried_from', ARGV[4], 'first_seq', 0, 'last_seq', 0)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _escape(value: str) -> str:
    return quote(value, safe="")


def _validate_session_id(session_id: Any, argument: str = "session_id") -> str:
    if not isinstance(session_id, str) or not session_id.strip():
        raise errors.invalid(argument, "must be a non-blank string", "e.g. the conversation's id")
    if len(session_id) > MAX_SESSION_ID_CHARS or "\x00" in session_id:
        raise errors.invalid(argument, f"must be 1 to {MAX_SESSION_ID_CHARS} characters, without NUL",
                             "use a short identifier such as a uuid")
    return session_id


def _positive(argument: str, value: Any, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise errors.invalid(argument, f"must be a positive number, not {value!r}", hint)


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def _redis_client(url: str):
    import redis
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.retry import Retry

    # Up to 3 retries with jittered exponential backoff (20 ms .. 0.5 s) on a
    # lost connection; the pool reconnects on the next call, so the same
    # client recovers once the server is back.
    retry = Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.02), 3)
    if url.startswith(CLUSTER_SCHEMES):
        # redis+cluster://host:port (any node of a Valkey Cluster): redis-py's RedisCluster.
        plain = url.replace("+cluster", "", 1)
        return redis.RedisCluster.from_url(plain, decode_responses=True, socket_timeout=2.0,
                                           socket_connect_timeout=1.0, retry=retry)
    return redis.Redis.from_url(
        url, decode_responses=True, socket_timeout=2.0, socket_connect_timeout=1.0, retry=retry,
        retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError])


class SessionBuffer:
    """The short-term buffer of live sessions in Valkey (see the module's text for the key layout).

    ``url`` is a ``redis://``/``rediss://``/``unix://`` URL, or
    ``redis+cluster://host:port`` (``rediss+cluster://``) for a Valkey
    Cluster reached through any of its nodes (default:
    ``MEMBANK_VALKEY_URL``, else the embedded server), or pass a ready
    ``client`` (``redis.Redis`` or ``redis.RedisCluster``, with
    ``decode_responses=True``). Every method takes the session's ``scope``
    (the same JSON object the bank's calls take) and its ``session_id``. ``window_tokens`` (> 0) bounds each session's
    window in cl100k_base tokens of its rendered turns; a fold trims it to
    ``low_watermark`` × ``window_tokens`` (0 < low_watermark <= 1) so that
    not every append summarizes. ``ttl_seconds`` (default 24 h) is refreshed
    on every write of a session. ``summarizer`` is ``"rules"`` (default), or
    any object with ``summarize(previous_summary, turns) -> str``.
    ``auto_fold=False`` leaves folding to explicit ``fold()`` calls (e.g. a
    background job when the summarizer is a slow model). ``lease_seconds``
    is how long one client may summarize a session before another may try.

    Raises InvalidArgumentError naming the argument, BufferUnavailableError
    when Valkey cannot be reached.
    """

    def __init__(self, url: str | None = None, *, client: Any = None, prefix: str = "membank",
                 window_tokens: int = 2048, low_watermark: float = 0.75,
                 ttl_seconds: float = DEFAULT_TTL_SECONDS, summarizer: str | Summarizer | None = None,
                 tokenizer: Tokenizer | None = None, auto_fold: bool = True, lease_seconds: float = 30.0) -> None:
        """Connect (lazily: the first command opens the connection) and validate the settings."""
        if not isinstance(prefix, str) or not prefix or len(prefix) > MAX_PREFIX_CHARS or "\x00" in prefix:
            raise errors.invalid("prefix", f"must be 1 to {MAX_PREFIX_CHARS} characters, without NUL",
                                 'e.g. "membank" or your application\'s name')
        if isinstance(window_tokens, bool) or not isinstance(window_tokens, int) or window_tokens < 1:
            raise errors.invalid("window_tokens", f"must be a positive integer, not {window_tokens!r}", "e.g. 2048")
        if not isinstance(low_watermark, (int, float)) or not 0 < low_watermark <= 1:
            raise errors.invalid("low_watermark", f"must be in (0, 1], not {low_watermark!r}", "e.g. 0.75")
        _positive("ttl_seconds", ttl_seconds, "e.g. 86400 for 24 hours")
        _positive("lease_seconds", lease_seconds, "e.g. 30")
        self.prefix = prefix
        self.window_tokens = window_tokens
        self.low_watermark = float(low_watermark)
        self.ttl_seconds = float(ttl_seconds)
        self.lease_seconds = float(lease_seconds)
        self.auto_fold = auto_fold
        self.summarizer = get_summarizer(summarizer)
        self.tokenizer = tokenizer or get_tokenizer()
        if client is None:
            with self._unavailable():
                client = _redis_client(url or valkey_url())
        self.url = url
        self.client = client
        self._append = client.register_script(_APPEND)
        self._fold = client.register_script(_FOLD)
        self._carry = client.register_script(_CARRY)
        self._release = client.register_script(_RELEASE)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

    def __enter__(self) -> SessionBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------
    @contextlib.contextmanager
    def _unavailable(self) -> Iterator[None]:
        import redis

        try:
            yield
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as err:
            raise BufferUnavailableError(
                f"Valkey is unreachable ({type(err).__name__}: {err})",
                hint=f"start it (`membank valkey start`) or check {ENV_VALKEY_URL}; the call stored nothing "
                     "it did not report") from None
        except redis.exceptions.RedisError as err:
            raise errors.MembankError(f"Valkey refused the command: {err}",
                                      hint="check that the server is Valkey >= 7 or Redis >= 7") from None

    def keys(self, scope: Mapping[str, str], session_id: str) -> dict[str, str]:
        """Return the Valkey keys of a scope's session by purpose (turns, meta, summary, ids, lease).

        Raises InvalidArgumentError naming ``scope`` or ``session_id``.
        """
        tag = _scope_id(scope)
        session_id = _validate_session_id(session_id)
        base = f"{_escape(self.prefix)}:{{{tag}:{_escape(session_id)}}}:"
        return {suffix: base + suffix for suffix in _SUFFIXES}

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl_seconds * 1000))

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease_seconds * 1000))

    # -- writes -----------------------------------------------------------------
    def append(self, scope: Mapping[str, str], session_id: str,
               turns: Turn | Mapping[str, Any] | Iterable[Turn | Mapping[str, Any]]) -> list[Turn]:
        """Append one or more turns to a scope's session, atomically and in the given order; return them as stored.

        ``turns``: a Turn, a mapping ``{"role", "text", "timestamp"?,
        "event_id"?, "author"?}``, or a list of those (all stored or none).
        Each comes back with its ``seq`` and ``tokens``; a turn whose
        ``event_id`` is already stored in the session is not stored again and
        comes back with its first ``seq`` (so a retried call is harmless).
        Refreshes the session's TTL. When the window now exceeds
        ``window_tokens`` and ``auto_fold`` is on, folds the oldest turns into
        the rolling summary before returning (a failing summarizer is logged
        and leaves the turns in the window).

        Raises InvalidArgumentError naming ``scope``, ``session_id`` or
        ``turns[i].field`` (nothing is stored), BufferUnavailableError when
        Valkey cannot be reached (then the turns are not reported stored; a
        retry with the same event_ids is safe).
        """
        keys = self.keys(scope, session_id)
        if isinstance(turns, (Turn, Mapping)):
            turns = [turns]
        items = list(turns)
        if not items:
            raise errors.invalid("turns", "must hold at least one turn", 'e.g. [{"role": "user", "text": "hi"}]')
        checked = [coerce_turn(t, i) for i, t in enumerate(items)]
        checked = [t if t.event_id else Turn(t.role, t.text, t.timestamp, uuid.uuid4().hex, t.author) for t in checked]
        lease = uuid.uuid4().hex
        args: list[Any] = [self._ttl_ms, self.window_tokens if self.auto_fold else 0, lease, self._lease_ms]
        counted = []
        for t in checked:
            tokens = self.tokenizer.count(t.render())
            counted.append(tokens)
            args += [t.event_id, tokens, t._body()]
        with self._unavailable():
            seqs, window_tokens, fold = self._append(
                keys=[keys["turns"], keys["ids"], keys["meta"], keys["summary"], keys["lease"]], args=args)
        stored = [Turn(t.role, t.text, t.timestamp, t.event_id, t.author, abs(int(seq)), tokens)
                  for t, seq, tokens in zip(checked, seqs, counted)]
        if fold:
            # This call took the lease: fold now, from the state the script returned (no extra read).
            entries, summary = fold
            try:
                self._fold_rounds(keys, lease, [entries, dict(zip(summary[::2], summary[1::2])), window_tokens])
            except Exception:  # the turns are stored; the summary waits for the next fold
                log.warning("session buffer: summarizing failed; the window stays over budget until the next fold",
                            exc_info=True)
        return stored

    def fold(self, scope: Mapping[str, str], session_id: str, *, force: bool = False) -> int:
        """Summarize-before-trim: fold the oldest turns into the rolling summary until the window fits.

        Runs when the window exceeds ``window_tokens`` (or always with
        ``force=True``, down to the low watermark), unless another client holds
        the session's lease. Trims the window down to ``low_watermark`` ×
        ``window_tokens`` tokens, keeping at least the newest turn. The
        summary is written and the turns trimmed in one Lua step that checks
        that the summary is still the one read; if it is not, it reads again
        (at most 8 rounds). Returns how many turns were folded.

        Raises InvalidArgumentError, BufferUnavailableError, and whatever the
        summarizer raises (then nothing is trimmed).
        """
        keys = self.keys(scope, session_id)
        lease = uuid.uuid4().hex
        # Take the lease and read the session in one round trip.
        with self._unavailable():
            pipe = self.client.pipeline(transaction=True)
            pipe.set(keys["lease"], lease, nx=True, px=self._lease_ms)
            self._queue_read(pipe, keys)
            got, *raw = pipe.execute()
        if not got:
            return 0
        return self._fold_rounds(keys, lease, raw, force=force)

    def _fold_rounds(self, keys: Mapping[str, str], lease: str, raw: list, *, force: bool = False) -> int:
        """Fold from ``raw`` ([window entries, summary hash, window tokens], as read) while holding ``lease``;
        release it at the end. Returns how many turns were folded."""
        folded = 0
        held = True
        try:
            for round_ in range(8):
                if round_:
                    with self._unavailable():
                        pipe = self.client.pipeline(transaction=True)
                        self._queue_read(pipe, keys)
                        raw = pipe.execute()
                entries, summary_hash, window_tokens = raw[0], raw[1], int(raw[2] or 0)
                summary = RollingSummary._from_hash(summary_hash)
                if window_tokens <= self.window_tokens and not (force and round_ == 0):
                    break
                target = int(self.window_tokens * self.low_watermark)
                remaining = window_tokens
                chosen: list[Turn] = []
                for entry in entries[:-1]:  # never the newest turn; decode only what is folded
                    if remaining <= target:
                        break
                    seq, tokens, body = entry.split("|", 2)
                    chosen.append(Turn._from_body(body, int(seq), int(tokens)))
                    remaining -= int(tokens)
                if not chosen:
                    break
                text = self.summarizer.summarize(summary.text, chosen)
                if not isinstance(text, str):
                    raise errors.MembankError(f"summarizer: returned {type(text).__name__}, not str",
                                              hint="summarize(previous_summary, turns) must return the new summary")
                with self._unavailable():
                    status, left = self._fold(
                        keys=[keys["turns"], keys["meta"], keys["summary"], keys["ids"], keys["lease"]],
                        args=[summary.version, len(chosen), chosen[0].seq, chosen[-1].seq, text,
                              self.tokenizer.count(text), datetime.now(timezone.utc).isoformat(), self._ttl_ms,
                              lease, self.window_tokens])
                if status == 1:
                    folded += len(chosen)
                    if left <= self.window_tokens:
                        held = False  # the script released the lease
                        break
                # 0: another client wrote the summary meanwhile (its lease had lapsed); read again.
        finally:
            if held:
                with contextlib.suppress(Exception):
                    self._release(keys=[keys["lease"]], args=[lease])
        return folded

    def carry_over(self, scope: Mapping[str, str], previous_session_id: str, session_id: str, *,
                   fold_window: bool = True) -> RollingSummary:
        """Start ``session_id`` with the rolling summary of ``previous_session_id``, both of the same ``scope``.

        A summary never crosses scopes: the previous session is read under
        ``scope`` only.

        With ``fold_window`` the previous session's window is folded in too
        (through the summarizer), so the new summary covers all of it. The
        previous session is left as it was. Returns the new session's
        summary. Raises ConflictError when ``session_id`` already has a
        summary, InvalidArgumentError naming the argument,
        BufferUnavailableError.
        """
        _validate_session_id(previous_session_id, "previous_session_id")
        keys = self.keys(scope, session_id)
        if previous_session_id == session_id:
            raise errors.invalid("previous_session_id", "must differ from session_id",
                                 "carry over from the session that ended")
        previous = self.read(scope, previous_session_id)
        text = previous.summary.text
        if fold_window and previous.turns:
            text = self.summarizer.summarize(text, previous.turns)
        with self._unavailable():
            ok = self._carry(keys=[keys["summary"]], args=[
                text, self.tokenizer.count(text), datetime.now(timezone.utc).isoformat(), previous_session_id,
                self._ttl_ms])
        if ok != 1:
            raise errors.ConflictError(f"session_id: session {session_id!r} already has a rolling summary",
                                       hint="carry over into a new session, before its first fold")
        return self.read(scope, session_id).summary

    def delete(self, scope: Mapping[str, str], session_id: str) -> int:
        """Delete every key of a scope's session; return how many existed. Raises BufferUnavailableError."""
        keys = self.keys(scope, session_id)
        with self._unavailable():
            return int(self.client.delete(*keys.values()))

    def _scope_keys(self, scope: Mapping[str, str]) -> Iterator[Any]:
        # SCAN over <prefix>:{<scope id>:* (redis-py's RedisCluster scans every node)
        return self.client.scan_iter(match=f"{_escape(self.prefix)}:{{{_scope_id(scope)}:*", count=500)

    def count_scope(self, scope: Mapping[str, str]) -> int:
        """Count the keys of every session of ``scope`` (what ``delete_scope`` would delete), deleting nothing.

        Same SCAN as ``delete_scope``. Raises BufferUnavailableError.
        """
        with self._unavailable():
            return sum(1 for _ in self._scope_keys(scope))

    def delete_scope(self, scope: Mapping[str, str]) -> int:
        """Delete the keys of every session of ``scope`` (erasure); return how many existed.

        Finds them with SCAN over ``<prefix>:{<scope id>:*`` (on every node of a
        cluster), so sessions the database never heard of are erased too.
        Raises BufferUnavailableError.
        """
        deleted = 0
        with self._unavailable():
            for key in self._scope_keys(scope):
                deleted += int(self.client.delete(key))  # one key a call: keys of one scope span slots
        return deleted

    # -- reads ------------------------------------------------------------------
    def read(self, scope: Mapping[str, str], session_id: str) -> SessionState:
        """Return a consistent snapshot of a scope's session (one MULTI/EXEC): rolling summary, window, tokens, TTL.

        An unknown or expired session reads as empty. ``ttl_seconds`` is the
        time left before the session expires (None when it holds nothing).
        Raises InvalidArgumentError, BufferUnavailableError.
        """
        keys = self.keys(scope, session_id)
        with self._unavailable():
            pipe = self.client.pipeline(transaction=True)
            self._queue_read(pipe, keys)
            raw = pipe.execute()
        return self._parse_read(session_id, raw)

    @staticmethod
    def _queue_read(pipe: Any, keys: Mapping[str, str]) -> None:
        pipe.lrange(keys["turns"], 0, -1)
        pipe.hgetall(keys["summary"])
        pipe.hget(keys["meta"], "window_tokens")
        pipe.pttl(keys["meta"])
        pipe.pttl(keys["summary"])

    @staticmethod
    def _parse_read(session_id: str, raw: list) -> SessionState:
        entries, summary, window_tokens, ttl_meta, ttl_summary = raw
        turns = []
        for entry in entries:
            seq, tokens, body = entry.split("|", 2)
            turns.append(Turn._from_body(body, int(seq), int(tokens)))
        ttl = max(ttl_meta, ttl_summary)
        return SessionState(session_id, RollingSummary._from_hash(summary), turns, int(window_tokens or 0),
                            ttl / 1000 if ttl >= 0 else None)

    def window(self, scope: Mapping[str, str], session_id: str) -> list[Turn]:
        """Return the scope's session's window, oldest turn first.

        Raises InvalidArgumentError, BufferUnavailableError.
        """
        return self.read(scope, session_id).turns

    def summary(self, scope: Mapping[str, str], session_id: str) -> RollingSummary:
        """Return the session's rolling summary (empty when none).

        Raises InvalidArgumentError, BufferUnavailableError.
        """
        return self.read(scope, session_id).summary

    def ping(self) -> bool:
        """Return True when Valkey answers; raise BufferUnavailableError when it cannot be reached."""
        with self._unavailable():
            return bool(self.client.ping())
