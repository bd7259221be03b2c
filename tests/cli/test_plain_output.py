"""`switchboard admin usage` and `admin budget show` in a terminal: plain
aligned text (no Markdown), and every count with its right word: 0 runs,
1 run, 2 runs; 0 tokens, 1 token, 2 tokens."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from bot.accounts.budgets import period_end
from bot.accounts.identity import current_period
from bot.store import Store
from bot.store.models import Budget, ScheduledJob
from bot.types import utcnow
from tests.cli.seed import SeedRun, seed
from tests.cli.test_e2e_chat import run_cli

pytestmark = pytest.mark.e2e

MARKDOWN = ("**", "`", "|", "- ", "__")


def admin(args: list[str], db: Path) -> list[str]:
    result = run_cli(["admin", *args], db=db, api_key=None)
    assert result.returncode == 0, result.stderr
    for mark in MARKDOWN:
        assert mark not in result.stdout, (mark, result.stdout)
    return result.stdout.splitlines()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """bob: 2 runs, 1,200 tokens; carol: 1 run, 1 token, a fixed limit of 1 token
    and 1 token over it; dave: nothing, unlimited; erin: unlimited after
    spending 5 within a limit and 7 beyond it."""
    path = tmp_path / "db.sqlite"
    now = utcnow()
    period = current_period()
    started = max(now - timedelta(minutes=30), now.replace(day=1, hour=0, minute=0, second=0))
    asyncio.run(
        seed(
            path,
            ["bob", "carol", "dave", "erin"],
            ["console:dm-bob:-", "slack:C1:-"],
            [
                SeedRun(
                    "r1",
                    "bob",
                    "console:dm-bob:-",
                    started,
                    tokens=1000,
                    input_tokens=1000,
                    cost_usd=0.005,
                ),
                SeedRun(
                    "r2",
                    "bob",
                    "slack:C1:-",
                    started,
                    tokens=200,
                    output_tokens=200,
                    cost_usd=0.001,
                ),
                SeedRun("r3", "carol", "slack:C1:-", started, tokens=1, input_tokens=1),
            ],
            {
                "carol": Budget(
                    period=period, used=1, overage=1, limit_mode="fixed", limit_tokens=1
                ),
                "dave": Budget(period=period, limit_mode="unlimited"),
                "erin": Budget(period=period, used=5, overage=7, granted=3, limit_mode="unlimited"),
            },
        )
    )
    return path


def test_usage_report_is_aligned_columns_with_plural_words(db: Path) -> None:
    assert admin(["usage"], db) == [
        f"Usage in {current_period()}: 1,201 tokens, about $0.0060",
        "",
        "Top users",
        "  1.  bob (#1, console:bob)      1,200 tokens  $0.0060  2 runs",
        "  2.  carol (#2, console:carol)      1 token   $0.0000  1 run",
        "",
        "By platform",
        "  console  1,000 tokens  $0.0050",
        "  slack      201 tokens  $0.0010",
        "",
        "By model",
        "  claude-test  1,201 tokens  $0.0060",
    ]


def test_usage_of_one_user_says_0_1_and_2_runs(db: Path) -> None:
    period = current_period()
    for user, line in [
        (
            "dave",
            f"dave (#3, console:dave) in {period}: 0 tokens (0 in, 0 out, 0 cache), "
            "about $0.0000, 0 runs.",
        ),
        (
            "carol",
            f"carol (#2, console:carol) in {period}: 1 token (1 in, 0 out, 0 cache), "
            "about $0.0000, 1 run.",
        ),
        (
            "bob",
            f"bob (#1, console:bob) in {period}: 1,200 tokens (1,000 in, 200 out, 0 cache), "
            "about $0.0060, 2 runs.",
        ),
    ]:
        assert admin(["usage", f"console:{user}"], db) == [f"Usage of {line}"]


def test_budget_show_is_aligned_and_unlimited_has_no_overage(db: Path) -> None:
    resets = f"{period_end(current_period()):%Y-%m-%d}"
    assert admin(["budget", "show", "console:bob"], db) == [
        "user    bob (#1, console:bob)",
        "role    guest",
        "limit   5,000 tokens a month (role default)",
        "used    0 tokens this month",
        "left    5,000 tokens",
        f"resets  {resets}",
    ]
    assert admin(["budget", "show", "console:carol"], db) == [
        "user    carol (#2, console:carol)",
        "role    guest",
        "limit   1 token a month (fixed)",
        "used    1 token this month",
        "left    0 tokens",
        "over    1 token beyond the limit",
        f"resets  {resets}",
    ]
    assert admin(["budget", "show", "console:dave"], db) == [
        "user   dave (#3, console:dave)",
        "role   guest",
        "limit  unlimited (set for this user)",
        "used   0 tokens this month",
    ]
    assert admin(["budget", "show", "console:erin"], db) == [  # all it spent, nothing "over"
        "user   erin (#4, console:erin)",
        "role   guest",
        "limit  unlimited (set for this user)",
        "used   12 tokens this month",
    ]
    assert admin(["budget", "grant", "console:carol", "1"], db) == [
        "Granted 1 token to carol (#2, console:carol).",
        "limit   2 tokens a month (fixed + 1 granted)",
        "used    1 token this month",
        "left    1 token",
        "over    1 token beyond the limit",
        f"resets  {resets}",
    ]


def test_jobs_list_counts_failures_in_words(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    seeded = asyncio.run(seed(db, ["bob"], ["console:dm-bob:-"]))

    async def jobs() -> None:
        store = Store(f"sqlite+aiosqlite:///{db}")
        async with store.write() as session:
            for failures in (1, 2):
                session.add(
                    ScheduledJob(
                        owner_user_id=seeded.users["bob"],
                        conversation_id=seeded.conversations["console:dm-bob:-"],
                        prompt="Check the backups",
                        trigger_kind="interval",
                        trigger_expr="7200",
                        description="every 2h",
                        last_status="error",
                        failure_count=failures,
                    )
                )
        await store.dispose()

    asyncio.run(jobs())
    result = run_cli(["jobs", "list"], db=db, api_key=None)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "every 2h" in line]
    assert [line.rsplit(" / ", 1)[1] for line in lines] == ["error, 1 failure", "error, 2 failures"]
