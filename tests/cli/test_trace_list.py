"""`switchboard trace list`: the recent runs, newest first, as aligned plain
text (run id, start, conversation, user, status, tokens, duration), with
`--limit`, `--user` and `--conversation`; and the query behind it on every
database backend, over runs the pipeline really made."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.store.traces import recent_runs
from tests.cli.seed import SeedRun, seed
from tests.cli.test_e2e_chat import run_cli
from tests.fakes.anthropic import FakeUsage, text_reply
from tests.harness import message

ALL = [
    "RUN     STARTED (UTC)        CONVERSATION      USER           STATUS    TOKENS  DURATION",
    "r-new   2026-03-04 12:00:00  slack:C1:-        console:bob    running        0         -",
    "r-mid   2026-03-04 11:00:00  slack:C1:-        console:carol  failed         1    0.75 s",
    "r-old1  2026-03-04 10:00:00  console:dm-bob:-  console:bob    answered   1,200    2.50 s",
]
NEWEST_TWO = [  # also every run in slack:C1:-
    "RUN    STARTED (UTC)        CONVERSATION  USER           STATUS   TOKENS  DURATION",
    "r-new  2026-03-04 12:00:00  slack:C1:-    console:bob    running       0         -",
    "r-mid  2026-03-04 11:00:00  slack:C1:-    console:carol  failed        1    0.75 s",
]
BOBS = [
    "RUN     STARTED (UTC)        CONVERSATION      USER         STATUS    TOKENS  DURATION",
    "r-new   2026-03-04 12:00:00  slack:C1:-        console:bob  running        0         -",
    "r-old1  2026-03-04 10:00:00  console:dm-bob:-  console:bob  answered   1,200    2.50 s",
]


def trace(args: list[str], db: Path) -> list[str]:
    result = run_cli(["trace", *args], db=db, api_key=None)
    assert result.returncode == 0, result.stderr
    assert "**" not in result.stdout and "|" not in result.stdout
    return result.stdout.splitlines()


def seeded(tmp_path: Path) -> Path:
    db = tmp_path / "db.sqlite"
    at = datetime(2026, 3, 4, 10, tzinfo=UTC)
    runs = [  # inserted out of order: the listing sorts by start time
        SeedRun("r-mid", "carol", "slack:C1:-", at.replace(hour=11), "failed", 1, 0.75),
        SeedRun("r-old1", "bob", "console:dm-bob:-", at, "answered", 1200, 2.5),
        SeedRun("r-new", "bob", "slack:C1:-", at.replace(hour=12), "running"),
    ]
    asyncio.run(seed(db, ["bob", "carol", "dave"], ["console:dm-bob:-", "slack:C1:-"], runs))
    return db


@pytest.mark.e2e
def test_trace_list_newest_first_limited_and_filtered(tmp_path: Path) -> None:
    db = seeded(tmp_path)
    assert trace(["list"], db) == ALL
    assert trace(["list", "--limit", "2"], db) == NEWEST_TWO
    assert trace(["list", "--user", "console:bob"], db) == BOBS
    assert trace(["list", "--conversation", "slack"], db) == NEWEST_TWO
    assert trace(["list", "--conversation", "slack:C1:-"], db) == NEWEST_TWO
    assert trace(["list", "--user", "console:dave"], db) == ["no matching runs"]


@pytest.mark.e2e
def test_trace_list_empty_and_bad_arguments(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    assert run_cli(["db", "upgrade"], db=db, api_key=None).returncode == 0
    assert trace(["list"], db) == ["no runs yet"]
    unknown = run_cli(["trace", "list", "--user", "console:nobody"], db=db, api_key=None)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "switchboard: no user has the account console:nobody"
    zero = run_cli(["trace", "list", "--limit", "0"], db=db, api_key=None)
    assert zero.returncode == 2 and "'0' is not a positive whole number" in zero.stderr


async def test_recent_runs_of_real_runs_on_each_backend(make_app, fake_anthropic):
    app = await make_app()
    fake_anthropic.script(
        *(
            text_reply(f"answer {n}", usage=FakeUsage(input_tokens=n, output_tokens=1))
            for n in (1, 2, 3)
        )
    )
    for text, user, channel in [
        ("one", "bob", "room"),
        ("two", "carol", "hall"),
        ("three", "bob", "hall"),
    ]:
        outcome = await app.pipeline.handle(
            message(text, platform_user_id=user, platform_channel_id=channel)
        )
        assert outcome.run_id is not None

    runs = await recent_runs(app.store, 20)
    assert [(r.user, r.conversation_key, r.run.tokens) for r in runs] == [
        ("console:bob", "console:hall:-", 4),
        ("console:carol", "console:hall:-", 3),
        ("console:bob", "console:room:-", 2),
    ]
    assert all(r.run.status == "completed" and r.run.finished_at is not None for r in runs)
    assert [r.run.id for r in await recent_runs(app.store, 2)] == [r.run.id for r in runs[:2]]
    bob = runs[0].run.user_id
    assert [r.conversation_key for r in await recent_runs(app.store, 20, user_id=bob)] == [
        "console:hall:-",
        "console:room:-",
    ]
    hall = await recent_runs(app.store, 20, conversation="console:hall")
    assert [r.user for r in hall] == ["console:bob", "console:carol"]
    assert await recent_runs(app.store, 20, conversation="console:ha") == []  # whole parts only
