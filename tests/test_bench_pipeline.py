"""`make bench`'s in-process benchmark still runs and measures what it says, on
both databases: a short run as a subprocess (its figures are not judged here:
timing belongs to `make bench`, not to the tests)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import POSTGRES_URL
from tests.paths import REPO_ROOT


def run_bench(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_TEST_POSTGRES_URL"}
    if POSTGRES_URL:
        env["SWITCHBOARD_TEST_POSTGRES_URL"] = POSTGRES_URL
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.pipeline", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def after(out: str, heading: str, pattern: str) -> re.Match[str]:
    """`pattern`'s first match in what follows the line starting `heading`."""
    assert heading in out, out
    found = re.search(pattern, out.split(heading, 1)[1])
    assert found, f"no {pattern!r} after {heading!r} in:\n{out}"
    return found


@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
def test_every_mode_runs_on_sqlite_and_postgresql_with_its_floor() -> None:
    out = run_bench("--messages", "40", "--conversations", "30")
    for where in ("SQLite", "PostgreSQL"):
        for heading in (f"sequential ({where}): 40 messages", f"new users ({where}): 40 first"):
            assert float(after(out, heading, r"throughput\s+([\d.]+)")[1]) > 0
            assert after(out, heading, r"latency p50\s+[\d.]+ ms\s+\(floor [\d.]+ ms\)")
            # counted, not timed: a message writes at least its intake and its turn
            assert float(after(out, heading, r"statements\s+([\d.]+)")[1]) >= 2
            writes = after(out, heading, r"commits\s+[\d.]+ per message, ([\d.]+) of them")
            assert float(writes[1]) >= 2
        concurrent = after(
            out,
            f"concurrent ({where}): 30 conversations",
            r"wall time\s+[\d.]+ s\s+\((\d+) answered, (\d+) sent\)\s+\(floor [\d.]+ s",
        )
        assert concurrent.groups() == ("30", "30")
