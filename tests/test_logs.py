"""Log lines an operator can use (`bot.logs`): fields as JSON keys, one run id
on every line of one message's handling, redaction of every field."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sqlmodel import col, select

from bot.logs import MASK, run_scope, setup_logging
from bot.store.models import Run
from bot.types import Reply
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.scheduling.rig import FakeClock, add_job, started

SECRET = "hunter2hunter2"
SLACK_TOKEN = "xoxb-1234567890-abcdefghij"
log = logging.getLogger("switchboard.test")


def _capture(fmt: str) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    setup_logging("INFO", fmt, [SECRET], stream=stream)
    yield stream
    logging.getLogger().handlers.clear()


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    yield from _capture("json")


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    yield from _capture("text")


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def restart(stream: io.StringIO) -> None:
    stream.seek(0)
    stream.truncate(0)


# -- JSON fields ----------------------------------------------------------------


def test_event_and_key_value_pairs_become_json_keys(json_log):
    log.info(
        "run.completed run=%s conversation=%s user=%d tokens_in=%d cost=%s ts=%s ms=%.0f: %s",
        "ab12",
        "slack:T1:C2:-",
        42,
        1234,
        "0.25",
        "1712345678.000100",
        506.4,
        "the rest is free text",
    )
    (line,) = lines(json_log)
    assert line["message"].startswith("run.completed run=ab12 conversation=slack:T1:C2:- ")
    assert line["message"].endswith(": the rest is free text")
    assert (line["level"], line["logger"]) == ("INFO", "switchboard.test")
    assert line["event"] == "run.completed"
    assert line["run"] == "ab12"
    assert line["conversation"] == "slack:T1:C2:-"
    assert line["user"] == 42 and line["tokens_in"] == 1234 and line["ms"] == 506
    assert line["cost"] == 0.25
    assert line["ts"] == "1712345678.000100"  # an id that a float would change: kept as text
    assert "run_id" not in line  # logged outside any message's handling


def test_a_value_before_a_colon_quoted_or_too_long_for_a_number(json_log):
    log.warning("wakeup.orphaned job=%s: its conversation is gone", 7)
    log.warning("discord.command_skipped name=%r (not valid)", "two words")
    log.info("discord.ready id=%s", "1180000000000000001")
    orphaned, skipped, ready = lines(json_log)
    assert orphaned["job"] == 7
    assert skipped["name"] == "two words"
    assert ready["id"] == "1180000000000000001"  # a snowflake: JSON readers would round it


def test_extra_fields_become_keys_and_reserved_keys_are_never_overwritten(json_log):
    log.info("budget.changed level=%s message=%s", "high", "x", extra={"user": 7, "who": "cli"})
    (line,) = lines(json_log)
    assert (line["user"], line["who"]) == (7, "cli")
    assert line["level"] == "INFO"
    assert line["message"] == "budget.changed level=high message=x"


def test_other_libraries_lines_are_not_parsed(json_log):
    logging.getLogger("sqlalchemy.engine").warning("UPDATE budgets SET used=3 WHERE id=1")
    (line,) = lines(json_log)
    assert line["message"] == "UPDATE budgets SET used=3 WHERE id=1"
    assert "event" not in line and "used" not in line and "id" not in line


def test_every_field_is_redacted(json_log):
    log.warning("slack.post_retry channel=%s reason=%s", "C1", SLACK_TOKEN)
    log.info("cli.login note=%s", "x", extra={"detail": f"pw {SECRET}", "obj": {"k": SECRET}})
    try:
        raise RuntimeError(f"failed with {SECRET}")
    except RuntimeError:
        log.exception("tool.crashed tool=%s", "probe")
    out = json_log.getvalue()
    assert SECRET not in out and "abcdefghij" not in out
    retry, login, crashed = lines(json_log)
    assert retry["reason"] == MASK and MASK in retry["message"]
    assert login["detail"] == f"pw {MASK}" and SECRET not in json.dumps(login["obj"])
    assert MASK in crashed["exception"] and crashed["event"] == "tool.crashed"


def test_text_format_is_unchanged_outside_a_run_and_names_the_run_inside(text_log):
    log.info("run.completed tokens_in=%d", 5)
    with run_scope("ab12cd34"):
        log.info("tool.retry tool=%s", "probe")
    first, second = text_log.getvalue().splitlines()
    assert first.endswith(" INFO    switchboard.test: run.completed tokens_in=5")
    assert second.endswith(" INFO    switchboard.test [run=ab12cd34]: tool.retry tool=probe")


async def test_the_run_id_follows_into_tasks_and_ends_with_its_scope(json_log):
    async def spawned() -> None:
        log.info("test.spawned")

    with run_scope() as run_id:
        log.info("test.inside")
        await asyncio.create_task(spawned())
    log.info("test.after")
    inside, task, after = lines(json_log)
    assert inside["run_id"] == task["run_id"] == run_id
    assert "run_id" not in after


# -- one message, one run id ------------------------------------------------------


class LoggingAdapter(RecordingAdapter):
    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        logging.getLogger("switchboard.adapters.test").info("test.sent chars=%d", len(reply.text))
        return await super().send(reply, progress)


def logging_tool() -> ProbeTool:
    async def behaviour(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        log.info("test.tool_ran tool=%s", tool.name)

        async def later() -> None:
            log.info("test.spawned")

        await asyncio.create_task(later())
        return "ok"

    return ProbeTool("probe", behaviour)


async def test_every_line_of_one_message_carries_its_run_id(make_app, fake_anthropic, json_log):
    app = await make_app(tools=[logging_tool()])
    app.attach(LoggingAdapter())
    fake_anthropic.script(
        tool_use_reply(tool_call("probe")), text_reply("done"), text_reply("again")
    )
    restart(json_log)
    await app.pipeline.handle(message("hi", platform_message_id="m1"))
    first = lines(json_log)
    restart(json_log)
    await app.pipeline.handle(message("and now?", platform_message_id="m2"))
    second = lines(json_log)

    async with app.store.read() as s:
        runs = [r.id for r in (await s.exec(select(Run).order_by(col(Run.started_at)))).all()]
    assert len(runs) == 2 and runs[0] != runs[1]
    # identity, the tool, a task it started, the runner, the adapter: all of them
    events = {line["event"] for line in first}
    assert {"user.created", "test.tool_ran", "test.spawned", "run.completed", "test.sent"} <= events
    assert {line.get("run_id") for line in first} == {runs[0]}  # the run's id in the database
    assert {"run.completed", "test.sent"} <= {line["event"] for line in second}
    assert {line.get("run_id") for line in second} == {runs[1]}


async def test_a_wakeup_and_its_run_share_one_id(make_app, fake_anthropic, json_log):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    created = await add_job(app, "in 10 minutes")
    clock.advance(minutes=10)
    fake_anthropic.script("Reminder!")
    restart(json_log)
    assert await app.scheduler.run_due() == {created.id: "answered"}

    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
    by_event = {line["event"]: line for line in lines(json_log)}
    assert by_event["wakeup.run"]["job"] == created.id
    for event in ("wakeup.run", "run.completed", "wakeup.finished"):
        assert by_event[event]["run_id"] == run.id


def test_a_run_scope_outside_a_message_is_new_each_time():
    with run_scope() as one, run_scope() as two:
        assert one != two
