"""A bounded CPU load for latency benches: busy processes that the bench starts and stops.

``cpu_load(processes, seconds)`` starts ``processes`` busy programs (default
one per core this process may use): each a separate Python process that
spins until a deadline, in a session of its own, as another program on the
machine would be. (With Linux's ``sched_autogroup``, on here, the scheduler
shares the CPUs between sessions first; spinners in the bench's own session
would only slow the bench's session down, not model another program.) Two
busy processes on two cores then leave the bench's one thread about two
thirds of a core: 1.5x is the floor of a loaded/idle ratio. The spinners
are stopped when the block ends, and each stops by itself at the deadline,
so a bench that dies mid-run leaves no busy process behind for longer than
``seconds``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

SPIN = "import sys, time\nd = float(sys.argv[1])\nwhile time.time() < d:\n    sum(range(10000))\n"


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


@contextlib.contextmanager
def cpu_load(processes: int | None = None, seconds: float = 120.0) -> Iterator[int]:
    """Keep ``processes`` (default: every core) busy for at most ``seconds`` while the block runs; yields the count."""
    n = cores() if processes is None else processes
    deadline = time.time() + seconds
    procs = [subprocess.Popen([sys.executable, "-c", SPIN, repr(deadline)], start_new_session=True,
                              stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        time.sleep(0.5)  # let the spinners reach the scheduler's steady state
        yield n
    finally:
        for p in procs:
            p.terminate()
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
