"""Counts the tests that run against PostgreSQL (parametrized ids containing "postgres").

The summary line says how many ran and how many skipped. With ROOST_REQUIRE_POSTGRES=1 —
set by `.ci/run` once PostgreSQL started — a skipped PostgreSQL test fails the session: a
green CI must mean those tests ran wherever they could.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "ROOST_REQUIRE_POSTGRES"

_outcomes: dict[str, str] = {}


def _is_postgres(nodeid: str) -> bool:
    _, _, params = nodeid.partition("[")
    return "postgres" in params.lower()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _is_postgres(report.nodeid):
        return
    if report.skipped and hasattr(report, "wasxfail"):  # ran on PostgreSQL: a known bug showed
        _outcomes[report.nodeid] = "xfailed"
    elif report.skipped:
        _outcomes[report.nodeid] = "skipped"
    elif report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.when == "call":
        _outcomes.setdefault(report.nodeid, "passed")


def _counts() -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "xfailed": 0, "skipped": 0}
    for outcome in _outcomes.values():
        counts[outcome] += 1
    return counts


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    c = _counts()
    terminalreporter.write_line(
        f"PostgreSQL tests: {c['passed'] + c['failed'] + c['xfailed']} ran "
        f"({c['passed']} passed, {c['failed']} failed, {c['xfailed']} known bugs), {c['skipped']} skipped"
    )
    if os.environ.get(REQUIRE_ENV) == "1" and c["skipped"]:
        terminalreporter.write_line(
            f"{REQUIRE_ENV}=1: PostgreSQL started but {c['skipped']} of its tests skipped; failing.",
            red=True,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(REQUIRE_ENV) == "1" and _counts()["skipped"] and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
