"""CLI start-up: `membank --help`, `memories get NAME` and `memories list` as whole processes vs `python -c pass`.

Each command is run as a fresh process, interleaved round by round so that
drift of a shared machine hits all of them alike; the figures are wall
times and CPU times (user + system, from wait4) of the whole process
(start-up, imports, the database round trip), p50/p95, and the ratios are
to the bare interpreter (`python -c pass`) of the same round. The goal is
`memories list` within 4x the interpreter's CPU; the floor row shows what
importing the driver and click alone costs (no command can go below it
while it talks to PostgreSQL through psycopg). A reference row imports
what the CLI used to import at start-up (alembic/SQLAlchemy, psycopg,
numpy, the embedder module). The database is
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of ``argv``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    env = dict(os.environ)
    # As an installed package runs: from cached bytecode (the first, warming run writes it), not compiled each time.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
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
            "membank memories list": [membank, "memories", "list", "--scope", '{"user_id":"bench"}'],
            "floor: import psycopg, click": [sys.executable, "-c", "import psycopg, click"],
            "reference: the old start-up imports": [
                sys.executable, "-c", "import alembic.command, sqlalchemy, psycopg, psycopg_pool, numpy, click; "
                                      "import membank.embedding, membank.migrate"],
        }
        for argv in commands.values():  # warm the page cache
            timed(argv, env)
        times: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        ratios: dict[str, list[float]] = {k: [] for k in commands}
        cpu_ratios: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.runs):
            rounds = {k: timed(argv, env) for k, argv in commands.items()}
            for k, (wall, cpu) in rounds.items():
                times[k].append(wall)
                cpus[k].append(cpu)
                ratios[k].append(wall / rounds["python -c pass"][0])
                cpu_ratios[k].append(cpu / max(rounds["python -c pass"][1], 1e-6))
        where = "MEMBANK_DATABASE_URL" if data_dir is None else "the embedded server"
        print(f"{args.runs} runs each, interleaved; whole processes; database: {where}")
        print(f"{'command':38} {'wall p50':>8} {'p95':>6} {'ratio':>6} {'CPU p50':>8} {'p95':>6} {'ratio':>6}")
        for k in commands:
            print(f"{k:38} {statistics.median(times[k]):8.3f} {_p95(times[k]):6.3f} "
                  f"{statistics.median(ratios[k]):6.1f} {statistics.median(cpus[k]):8.3f} {_p95(cpus[k]):6.3f} "
                  f"{statistics.median(cpu_ratios[k]):6.1f}")
        print("ratio: p50 of each round's time over python -c pass's in the same round (CPU: user + system)")
    finally:
        if data_dir:
            subprocess.run([membank, "db", "stop"], env=env, capture_output=True)
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
