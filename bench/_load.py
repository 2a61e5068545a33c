"""A bounded CPU load for latency benches: another program's busy processes, started and stopped by the bench.

``cpu_load(processes, seconds)`` starts one load program, in a session of its
own as another program on the machine would be, that keeps ``processes``
processes (default one per core this process may use) spinning until a
deadline. ``sessions="each"`` starts every busy process in a session of its
own instead: several programs.

Why sessions matter: with Linux's ``sched_autogroup`` (on here, and by
default on most distributions) the scheduler shares the CPUs between
sessions first, then between the tasks of a session. One load program with
a busy process per core leaves the bench's single thread about one core:
the load then hurts a query only where it shares a core with a spinner,
i.e. when the query runs on several threads. With ``sessions="each"`` two
busy programs on two cores leave one thread about two thirds of a core, so
1.5x is the floor of a loaded/idle ratio (as it is for any load without
autogroup). Spinners in the bench's own session would only slow the bench's
session down, which models no other program.

The load stops when the block ends (its process group is killed), and every
busy process stops by itself at the deadline, so a bench that dies mid-run
leaves nothing spinning for longer than ``seconds``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

# argv: deadline (epoch seconds), processes. Forks processes - 1 children (same session), then all spin.
LOAD_PROGRAM = """
import os, sys, time
deadline, n = float(sys.argv[1]), int(sys.argv[2])
for _ in range(n - 1):
    if os.fork() == 0:
        break
while time.time() < deadline:
    sum(range(10000))
"""


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


@contextlib.contextmanager
def cpu_load(processes: int | None = None, seconds: float = 120.0, sessions: str = "one") -> Iterator[int]:
    """Keep ``processes`` (default: every core) busy for at most ``seconds`` while the block runs; yields the count.

    ``sessions``: ``"one"`` (one load program, default) or ``"each"`` (a program per busy process).
    """
    n = cores() if processes is None else processes
    deadline = repr(time.time() + seconds)
    if sessions == "one":
        programs = [[sys.executable, "-c", LOAD_PROGRAM, deadline, str(n)]]
    elif sessions == "each":
        programs = [[sys.executable, "-c", LOAD_PROGRAM, deadline, "1"] for _ in range(n)]
    else:
        raise ValueError(f"sessions: 'one' or 'each', not {sessions!r}")
    procs = [subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL) for argv in programs]
    try:
        time.sleep(0.5)  # let the spinners start and reach the scheduler's steady state
        yield n
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)  # the program and the children it forked
        for p in procs:
            p.wait(5)


def load_average() -> str:
    """The 1-minute load average and the runnable/total tasks, as /proc/loadavg gives them."""
    try:
        fields = open("/proc/loadavg").read().split()
        return f"load average {fields[0]}, runnable/total {fields[3]}"
    except OSError:
        return f"load average {os.getloadavg()[0]:.2f}"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
