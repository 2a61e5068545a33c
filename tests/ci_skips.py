"""In CI a skipped Citus test is a failure: CI must show that the cluster ran them.

Outside CI (no ``CI`` variable, as on a laptop without the vendored sources)
the Citus tests skip with their reason. With ``CI`` set to true/1/yes a skip
of a test marked ``citus`` is reported as a failure carrying the skip reason.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` = true, 1 or yes)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and item.get_closest_marker("citus") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a citus test was skipped in CI (CI={os.environ['CI']}): {reason}"
