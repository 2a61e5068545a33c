"""The loop of `membank worker` (rules provider, default embedder, LISTEN/NOTIFY) with timers for bench/freshness.py.

    python bench/_freshness_worker.py URL TIMERS_FILE POLL_INTERVAL

Every provider call (kind "model") and embedder call (kind "embed") is
appended to TIMERS_FILE as a JSON line {"kind", "start", "end"} (wall clock,
seconds). Prints "ready" on stderr once it listens.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pyclient"))

from membank.embedding import get_embedder  # noqa: E402
from membank.generation import get_provider  # noqa: E402
from membank.generation.worker import GenerationWorker  # noqa: E402
from membank.worker import EmbeddingWorker  # noqa: E402


def main() -> None:
    url, path, poll = sys.argv[1], sys.argv[2], float(sys.argv[3])
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    lock = threading.Lock()

    def record(kind: str, start: float) -> None:
        with lock:
            out.write(json.dumps({"kind": kind, "start": start, "end": time.time()}) + "\n")

    provider = get_provider("rules")
    embedder = get_embedder()
    complete = provider.complete
    embed_passages = embedder.embed_passages

    def timed_complete(*args, **kwargs):
        start = time.time()
        try:
            return complete(*args, **kwargs)
        finally:
            record("model", start)

    def timed_embed(*args, **kwargs):
        start = time.time()
        try:
            return embed_passages(*args, **kwargs)
        finally:
            record("embed", start)

    provider.complete = timed_complete
    embedder.embed_passages = timed_embed
    embedder.embed_passages(["warm up"])
    generation = GenerationWorker(url, provider, embedder)
    worker = EmbeddingWorker(url, embedder, generation=generation)
    worker.configure()
    print("ready", file=sys.stderr, flush=True)
    try:
        worker.run(poll_interval=poll)
    finally:
        worker.close()


if __name__ == "__main__":
    main()
