"""`make bench`'s benchmarks still run and measure what they say: short runs
as subprocesses (their figures are not judged here: timing belongs to `make
bench`, not to the tests)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.benchmarks.counting import SqlCounter
from tests.conftest import POSTGRES_URL
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.perf, pytest.mark.e2e]  # the front door's benchmarks run the service


def run_bench(module: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_TEST_POSTGRES_URL"}
    if POSTGRES_URL:
        env["SWITCHBOARD_TEST_POSTGRES_URL"] = POSTGRES_URL
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
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
    out = run_bench("tests.benchmarks.pipeline", "--messages", "40", "--conversations", "30")
    for where in ("SQLite", "PostgreSQL"):
        headings = (
            f"sequential ({where}): 40 messages",
            f"returning after a pause ({where}): 40 messages",
            f"new users ({where}): 40 first",
        )
        for heading in headings:
            assert float(after(out, heading, r"throughput\s+([\d.]+)")[1]) > 0
            assert after(out, heading, r"latency p50\s+[\d.]+ ms\s+\(floor [\d.]+ ms: [\d.]+×\)")
            # the service and the floor measured in turns: a CPU ratio per window
            ratios = after(out, heading, r"per window\s+CPU (.*) the floor's")[1].split(", ")
            assert len(ratios) == 4 and all(float(r.rstrip("×")) > 0 for r in ratios)
            split = after(
                out, heading, r"model split\s+([\d.]+) ms before the model call, ([\d.]+)"
            )
            assert float(split[1]) > 0 and float(split[2]) > 0
            # counted, not timed: a message writes at least its intake and its turn
            assert float(after(out, heading, r"statements\s+([\d.]+)")[1]) >= 2
            writes = after(out, heading, r"commits\s+[\d.]+ per message, ([\d.]+) of them")
            assert float(writes[1]) >= 2
        # after a pause each message reads what was cached again
        statements = [float(after(out, h, r"statements\s+([\d.]+)")[1]) for h in headings[:2]]
        assert statements[1] > statements[0], statements
        heading = f"concurrent ({where}): 30 conversations"
        bursts = re.findall(
            r"wall time\s+[\d.]+ s\s+\((\d+) answered, (\d+) sent\)\s+\(floor [\d.]+ s: "
            r"[\d.]+×\); CPU ([\d.]+) ms/message",
            out.split(heading, 1)[1].split("peak RSS", 1)[0],
        )
        # new users, then the same conversations again: every message answered
        assert [b[:2] for b in bursts] == [("30", "30"), ("30", "30")]
        assert all(float(b[2]) > 0 for b in bursts)
        if where == "SQLite":  # counted: commits, several messages may share one
            commits = re.findall(r"; ([\d.]+) commits/message", out.split(heading, 1)[1])
            assert len(commits) >= 2 and all(0 < float(c) <= 6 for c in commits[:2]), commits
        calls = re.findall(
            r"model calls\s+first ([\d.]+) s, last ([\d.]+) s; replies first ([\d.]+) s",
            out.split(heading, 1)[1],
        )
        # each message reached the model before its reply went out, 1 s later
        assert len(calls) >= 2 and all(float(c[0]) + 1 <= float(c[2]) for c in calls[:2])


def test_front_door_closed_loop_measures_both_processes_in_turn() -> None:
    """The service and the minimal bot as subprocesses behind the fakes, two
    rounds of windows each: every message answered (the run would time out),
    both processes' CPU read, one ratio per round."""
    out = run_bench(
        "tests.benchmarks.frontdoor", "--messages", "16", "--in-flight", "2", "--rounds", "2"
    )
    heading = "front door: 16 Slack DMs, 2 in flight, sqlite, instant model, 2 rounds"
    calls = after(out, heading, r"LLM calls/msg\s+([\d.]+)\s+\(minimal bot ([\d.]+)\)")
    assert float(calls[1]) >= 1 and float(calls[2]) == 1
    cpu = after(out, heading, r"process CPU\s+([\d.]+) ms/message\s+\(minimal bot ([\d.]+) ms")
    assert float(cpu[1]) > 0 and float(cpu[2]) > 0
    ratios = after(out, heading, r"CPU ratio per round\s+(.*)")[1].split(", ")
    assert len(ratios) == 2 and all(r.endswith("×") and float(r[:-1]) > 0 for r in ratios)
    assert after(out, heading, r"throughput ratio\s+([\d.]+)×")


def test_the_mechanisms_table_has_a_row_per_variant() -> None:
    """One service per variant (all on, the plain path, each mechanism off)
    beside the minimal bot: every message answered by each (the run would
    time out), a row of figures for each."""
    from tests.benchmarks.mechanisms import VARIANTS

    out = run_bench(
        "tests.benchmarks.mechanisms", "--messages", "4", "--in-flight", "1", "--rounds", "1"
    )
    heading = "mechanisms: 4 Slack DMs per variant, 1 in flight, sqlite, 1 rounds"
    for name in [*VARIANTS["sqlite"], "minimal bot"]:
        assert after(out, heading, rf"\n  {name} +([\d.]+) ")


def test_every_mode_runs_on_one_given_database_file(tmp_path: Path) -> None:
    """`--database-url`: the modes share the file, and each mode's floor starts
    from a fresh database of its own (the second used to find the first's
    tables, fail, and leave the process hanging on the floor's open connection)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'bench.db'}"
    out = run_bench(
        "tests.benchmarks.pipeline",
        *("--messages", "10", "--conversations", "5", "--database-url", url),
    )
    for heading in ("sequential (SQLite): 10", "new users (SQLite): 10", "concurrent (SQLite): 5"):
        assert after(out, heading, r"\(floor [\d.]+ (ms|s)")


async def test_statement_counter_tells_reads_from_writes(tmp_path: Path) -> None:
    """A transaction that only read (a SELECT, or a WITH query whose parts all
    read) is not counted as writing; one with an INSERT, or a WITH that
    inserts, is."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'count.db'}")
    counter = SqlCounter({engine})
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        assert (counter.statements, counter.writes) == (1, 1)
        reads = [
            "SELECT x FROM t",
            "WITH h AS MATERIALIZED (SELECT 1 AS y) SELECT y FROM h UNION ALL SELECT x FROM t",
        ]
        for sql in reads:
            async with engine.begin() as conn:
                await conn.execute(text(sql))
        assert (counter.statements, counter.commits, counter.writes) == (3, 3, 1)
        writes = ["INSERT INTO t VALUES (1)", "WITH v AS (SELECT 2) INSERT INTO t SELECT * FROM v"]
        for sql in writes:
            async with engine.begin() as conn:
                await conn.execute(text(sql))
        assert (counter.statements, counter.commits, counter.writes) == (5, 5, 3)
        # in autocommit each statement is a transaction of its own; the
        # commit that follows sends nothing and is not counted
        alone = engine.execution_options(isolation_level="AUTOCOMMIT")
        async with alone.begin() as conn:
            await conn.execute(text("SELECT x FROM t"))
            await conn.execute(text("INSERT INTO t VALUES (3)"))
        assert (counter.statements, counter.commits, counter.writes) == (7, 7, 4)
    finally:
        await engine.dispose()


def test_the_instructions_workloads_run_and_their_count_is_read(tmp_path: Path) -> None:
    """What `tests.benchmarks.instructions` runs under callgrind runs (here
    without it: the count itself belongs to `make bench`), and the
    count is read from what valgrind prints."""
    for workload in ("service", "floor"):
        url = f"sqlite+aiosqlite:///{tmp_path / f'{workload}.db'}"
        run_bench(
            "tests.benchmarks.instructions", "--run", workload, "--messages", "3", "--url", url
        )
        assert list(tmp_path.glob(f"{workload}.db*"))  # it wrote its database
    from tests.benchmarks.instructions import collected

    assert collected("==1== Collected : 7636546661\n==1== \n") == 7636546661
    with pytest.raises(ValueError):
        collected("valgrind: command not found")


def test_turn_floors_print_each_way_beside_the_service() -> None:
    out = run_bench("tests.benchmarks.turn_floors", "--turns", "20", "--messages", "20")
    for where in ("SQLite", "PostgreSQL") if POSTGRES_URL else ("SQLite",):
        heading = f"floors ({where}): one turn's six rows, 20 turns each way"
        for label in ("raw SQL", "one round trip", "SQLAlchemy Core", "SQLAlchemy ORM"):
            found = after(out, heading, rf"{label}.*?([\d.]+) µs  CPU\s+([\d.]+) µs")
            assert float(found[1]) > 0 and float(found[2]) > 0
        service = after(
            out, heading, r"the service, 20 messages\s+p50\s+([\d.]+) ms \((\d+)× raw\)"
        )
        assert float(service[1]) > 0 and int(service[2]) >= 1


async def test_each_floor_writes_the_same_six_rows_a_turn(tmp_path: Path) -> None:
    """Raw SQL, Core and the ORM each write, per turn (warm-up included), two
    messages, an outbox row, a run, a token log, and end one inbox row."""
    import sqlite3

    from tests.benchmarks.turn_floors import WARM_UP, on_sqlite

    figures = await on_sqlite(tmp_path, 10, 5)
    assert set(figures) == {"raw", "trip", "core", "orm", "service"}
    turns = 3 * (10 + WARM_UP)
    with sqlite3.connect(tmp_path / "floors.db") as db:
        counts = {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("tf_messages", "tf_outbox", "tf_runs", "tf_tokens")
        }
        answered = db.execute("SELECT count(*) FROM tf_inbox WHERE status = 'answered'")
        assert answered.fetchone()[0] == turns
        # every way wrote the values, not empty rows
        replies = db.execute("SELECT count(*) FROM tf_messages WHERE content = 'ok'")
        assert replies.fetchone()[0] == turns
        logged = db.execute("SELECT count(*) FROM tf_tokens WHERE run_id LIKE 'r%'")
        assert logged.fetchone()[0] == turns
    assert counts == {
        "tf_messages": 2 * turns,
        "tf_outbox": turns,
        "tf_runs": turns,
        "tf_tokens": turns,
    }


def test_flow_prints_the_first_messages_after_a_start_with_and_without_the_warm_up() -> None:
    out = run_bench("tests.benchmarks.flow", "--only", "first")
    heading = "first messages after a start"
    for side in ("with the warm-up", "without the warm-up"):
        found = after(
            out, heading, rf"{side}\s+first\s+(\d+) ms, loop lag max (\d+) ms.*second\s+(\d+) ms"
        )
        assert int(found[1]) > 0 and int(found[3]) > 0


def test_the_mcp_tools_figures_show_a_small_prompt_however_many_tools() -> None:
    out = run_bench("tests.benchmarks.context", "--mcp-only")
    rows = {
        m[1].strip(): (int(m[2].replace(",", "")), int(m[4]))
        for m in re.finditer(
            r"^  (.+?)\s+([\d,]+)\s+([\d,]+)\s+\((\d+) tool definitions", out, re.M
        )
    }
    none, ten = rows["0 MCP tools"], rows["10 MCP tools (inline)"]
    searched, inline = rows["200 MCP tools (tool_search)"], rows["200 MCP tools forced inline"]
    assert ten[1] == none[1] + 10 and searched[1] == none[1] + 1  # only tool_search added
    assert none[0] < searched[0] < ten[0] < inline[0]


def test_the_skills_and_sub_agent_figures() -> None:
    out = run_bench("tests.benchmarks.agent_costs")
    hi = {
        int(m[1]): (int(m[2].replace(",", "")), int(m[3]))
        for m in re.finditer(
            r"^\s+(\d+) skills \(.+?\)\s+([\d,]+) tokens\s+\((\d+) tool", out, re.M
        )
    }
    assert hi[15][1] == hi[0][1] + 2 and hi[40][1] == hi[0][1] + 3  # the skills' tools
    assert hi[0][0] < hi[40][0] < hi[15][0]  # searching costs less than listing 15
    turns = re.findall(r"^  (inline|delegated).*?, (task|follow-up)\s+(\d+)\s", out, re.M)
    assert [int(calls) for *_, calls in turns] == [2, 1, 4, 1]  # the child's 2 calls counted
