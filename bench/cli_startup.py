"""CLI start-up: `membank --help` and `membank memories get NAME` as whole processes, p50/p95, vs `python -c pass`.

Each command is run as a fresh process, interleaved round by round so that
drift of a shared machine hits all of them alike; the figures are wall
times of the whole process (start-up, imports, the database round trip),
and the ratios are to the bare interpreter (`python -c pass`) of the same
round. A reference row imports what the CLI used to import at start-up
(alembic/SQLAlchemy, psycopg, numpy, the embedder module). The database is
MEMBANK_DATABASE_URL, else the embedded server in a temporary data dir
(started once, before the runs, and stopped after).

    .venv/bin/python bench/cli_startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    env = dict(os.environ)
    data_dir = None
    if "MEMBANK_DATABASE_URL" not in env:
        data_dir = tempfile.mkdtemp(prefix="membank-bench-cli-", dir="/tmp")
        os.chmod(data_dir, 0o755)
        env["MEMBANK_DATA_DIR"] = data_dir
    membank = str(BIN / "membank")
    try:
        subprocess.run([membank, "db", "start"], env=env, check=True, capture_output=True)
        created = subprocess.run([membank, "memories", "create", "--scope", '{"user_id":"bench"}', "--fact",
                                  "User is allergic to peanuts"], env=env, check=True, capture_output=True,
                                 text=True)
        name = json.loads(created.stdout)["name"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "membank --help": [membank, "--help"],
            "membank memories get NAME": [membank, "memories", "get", name],
            "reference: the old start-up imports": [
                sys.executable, "-c", "import alembic.command, sqlalchemy, psycopg, psycopg_pool, numpy, click; "
                                      "import membank.embedding, membank.migrate"],
        }
        for argv in commands.values():  # warm the page cache
            timed(argv, env)
        times: dict[str, list[float]] = {k: [] for k in commands}
        ratios: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.runs):
            round_times = {k: timed(argv, env) for k, argv in commands.items()}
            for k, t in round_times.items():
                times[k].append(t)
                ratios[k].append(t / round_times["python -c pass"])
        print(f"{args.runs} runs each, interleaved; wall seconds of the whole process")
        print(f"{'command':40} {'p50 s':>7} {'p95 s':>7} {'p50 ratio to python -c pass':>28}")
        for k in commands:
            ts = sorted(times[k])
            p95 = ts[min(len(ts) - 1, int(round(0.95 * (len(ts) - 1))))]
            print(f"{k:40} {statistics.median(ts):7.3f} {p95:7.3f} {statistics.median(ratios[k]):28.1f}")
    finally:
        if data_dir:
            subprocess.run([membank, "db", "stop"], env=env, capture_output=True)
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
