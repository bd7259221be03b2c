"""An operator's change made with the CLI (another process) counts from the
running service's very next message, although the service caches accounts
and budget limits: the real `switchboard run` as a subprocess (Slack over
HTTP, the fake model) and the real `switchboard admin` commands, on SQLite and
on PostgreSQL. So does a memory saved through another instance."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text
from sqlmodel import select

from bot.store.models import ScheduledJob
from bot.types import utcnow
from tests.cli.test_e2e_chat import run_cli
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import (
    FakeAnthropic,
    MessageReply,
    last_user_text,
    text_reply,
    tool_use_reply,
)
from tests.fakes.slack import BOT_USER_ID, FakeSlack, event_body
from tests.pipeline.test_crash_recovery import dm_event, replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

USED_UP = "tokens this month; the allowance resets on"


async def switchboard(database: Database, *args: str) -> str:
    """`switchboard …` in a process of its own, on the service's database."""
    env = {"SWITCHBOARD__DATABASE__URL": database.url}
    if database.schema:
        env["SWITCHBOARD__DATABASE__SCHEMA_NAME"] = database.schema
    done = await asyncio.to_thread(run_cli, list(args), env=env, api_key=None)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def admin(database: Database, *args: str) -> str:
    """`switchboard admin …`, as an operator runs it beside the service."""
    return await switchboard(database, "admin", *args)


class Chat:
    """One Slack DM with the running service: say something, wait for the answer."""

    def __init__(self, sender: SlackSender, slack: FakeSlack, service: Service) -> None:
        self.sender, self.slack, self.service = sender, slack, service
        self.said = 0

    async def say(self, text: str, *, via: SlackSender | None = None, dm: str = "D1") -> str:
        """`via`: another instance's endpoint instead of this service's; `dm`:
        another conversation of the same user."""
        self.said += 1
        before = len(replies_in(self.slack, dm))
        event = dm_event(dm, "U1", text, f"1700000001.{self.said:06d}")
        await (via or self.sender).deliver(event)
        await wait_for(
            lambda: len(replies_in(self.slack, dm)) > before,
            f"the answer to {text!r}",
            self.service,
        )
        return replies_in(self.slack, dm)[-1]


@dataclass
class Running:
    """The service running on `database`, its fake model, and a chat with it."""

    service: Service
    model: FakeAnthropic
    chat: Chat


@contextlib.asynccontextmanager
async def running(database: Database, tmp_path: Path, **extra: str) -> AsyncIterator[Running]:
    """`switchboard run` on `database` (guests: unlimited), answering "re: …"."""
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        env = service_env(database, model, slack, port := free_port(), **extra)
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                yield Running(
                    service, model, Chat(SlackSender(http, [service.url]), slack, service)
                )
        finally:
            await service.stop()


async def test_a_budget_set_with_the_cli_counts_from_the_next_message(
    database: Database, tmp_path: Path
) -> None:
    async with running(database, tmp_path) as it:
        assert await it.chat.say("hello") == "re: hello"
        assert await it.chat.say("again") == "re: again"  # known here: cached
        shown = await admin(database, "budget", "set", "slack:U1", "1")
        assert "limit   1 token a month (fixed)" in shown, shown
        calls = it.model.request_count
        assert USED_UP in await it.chat.say("one more")
        assert it.model.request_count == calls  # refused before any LLM call
        await admin(database, "budget", "set", "slack:U1", "unlimited")
        assert await it.chat.say("and now") == "re: and now"


async def test_a_role_set_with_the_cli_counts_from_the_next_message(
    database: Database, tmp_path: Path
) -> None:
    # guests may spend freely, users not at all
    async with running(database, tmp_path, SWITCHBOARD__BUDGETS__USER="1") as it:
        assert await it.chat.say("hello") == "re: hello"
        assert "is now user (was guest)" in await admin(database, "role", "slack:U1", "user")
        calls = it.model.request_count
        assert USED_UP in await it.chat.say("one more")
        assert it.model.request_count == calls
        assert "is now guest" in await admin(database, "role", "slack:U1", "guest")
        assert await it.chat.say("and now") == "re: and now"


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
async def test_a_change_made_while_the_database_cut_every_connection_still_counts(
    pg: Database, tmp_path: Path
) -> None:
    """PostgreSQL: the service's connections, the one listening for notices
    among them, are cut (a database restart, a failover); the notice of a
    change made meanwhile is lost, and must not be needed."""
    async with running(pg, tmp_path) as it:
        assert await it.chat.say("hello") == "re: hello"
        await cut_every_connection(pg)
        await wait_for(
            lambda: any("control.listener_lost" in line for line in it.service.logs),
            "the lost listener noticed",
            it.service,
        )
        await admin(pg, "budget", "set", "slack:U1", "1")
        calls = it.model.request_count
        assert USED_UP in await it.chat.say("one more")
        assert it.model.request_count == calls
    listening = [line for line in it.service.logs if "control.listening" in line]
    assert len(listening) >= 2, it.service.log_text  # and it listens again


async def test_a_budget_set_with_the_cli_counts_from_the_next_llm_call_of_a_run_going_on(
    database: Database, tmp_path: Path
) -> None:
    """A run that began unlimited makes another LLM call for a message that
    joined it: a budget set with the CLI while the first call went on
    counts there (that call is not made; the user is told)."""
    async with running(database, tmp_path) as it:
        slow_call = threading.Event()  # answered once the budget is set

        def slow_first(body: dict[str, Any]) -> MessageReply:
            said = last_user_text(body)
            return text_reply(f"re: {said}", hold=slow_call if said == "slow" else None)

        it.model.responder = slow_first
        assert await it.chat.say("hello") == "re: hello"
        answering = asyncio.create_task(it.chat.say("slow"))
        try:
            await wait_for(lambda: it.model.request_count == 2, "the slow call", it.service)
            it.chat.said += 1
            joining = dm_event("D1", "U1", "and this", f"1700000001.{it.chat.said:06d}")
            await it.chat.sender.deliver(joining)  # the run takes it after the slow call
            await admin(database, "budget", "set", "slack:U1", "1")
            assert not answering.done()
        finally:
            slow_call.set()
        assert USED_UP in await answering
        assert it.model.request_count == 2  # the next call was not made
        await asyncio.sleep(1.0)
        assert it.model.request_count == 2
        assert len(replies_in(it.chat.slack, "D1")) == 2, replies_in(it.chat.slack, "D1")


def in_thread(user: str, text: str, ts: str) -> dict[str, Any]:
    """A reply in thread THREAD of channel C1, @mentioning the bot: one
    conversation, whoever writes."""
    return event_body(
        {
            "type": "message",
            "channel": "C1",
            "channel_type": "channel",
            "user": user,
            "text": f"<@{BOT_USER_ID}> {text}",
            "ts": ts,
            "thread_ts": THREAD,
            "event_ts": ts,
        }
    )


THREAD = "1700000000.000001"


async def test_a_budget_set_with_the_cli_counts_for_a_message_that_waited_for_its_turn(
    database: Database, tmp_path: Path
) -> None:
    """Another user's message in a thread whose run is going on waits for the
    next run: a budget set with the CLI while it waited counts when its turn
    comes (no LLM call). (The recovery sweep, which looks for other processes'
    writes too, is kept out of the way.)"""
    async with running(database, tmp_path, SWITCHBOARD__INBOX__SWEEP_SECONDS="600") as it:
        slack, sender = it.chat.slack, it.chat.sender
        slow_call = threading.Event()  # answered once the budget is set

        def slow_for_ann(body: dict[str, Any]) -> MessageReply:
            said = last_user_text(body)  # "[U1] slow": who said it, in a channel
            return text_reply(f"re: {said}", hold=slow_call if said.endswith(" slow") else None)

        it.model.responder = slow_for_ann
        await sender.deliver(in_thread("U2", "hello", "1700000002.000001"))
        await wait_for(lambda: len(replies_in(slack, "C1")) == 1, "bob's hello", it.service)
        try:
            await sender.deliver(in_thread("U1", "slow", "1700000002.000002"))
            await wait_for(lambda: it.model.request_count == 2, "ann's slow call", it.service)
            await sender.deliver(in_thread("U2", "and me", "1700000002.000003"))  # waits
            await admin(database, "budget", "set", "slack:U2", "1")
            assert len(replies_in(slack, "C1")) == 1
        finally:
            slow_call.set()
        await wait_for(lambda: len(replies_in(slack, "C1")) == 3, "both answers", it.service)
        assert replies_in(slack, "C1")[1] == "re: [U1] slow"
        assert USED_UP in replies_in(slack, "C1")[2]
        assert it.model.request_count == 2  # refused before any LLM call


def with_tools(body: dict[str, Any]) -> MessageReply:
    """The model: saves what it is asked to remember ("remember …"), schedules
    a wakeup asked for ("wake me in …"), says "noted" once the tool answered,
    else answers "re: …"."""
    said = last_user_text(body)
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(block.get("type") == "tool_result" for block in last):
        return text_reply("noted")
    if said.startswith("remember "):
        return tool_use_reply(("memory_save", {"text": said.removeprefix("remember ")}))
    if said.startswith("wake me "):
        when = said.removeprefix("wake me ")
        return tool_use_reply(("schedule_add", {"prompt": "say hi", "when": when}))
    return text_reply(f"re: {said}")


async def the_job(database: Database) -> ScheduledJob:
    """The only scheduled job, as stored."""
    store = database.store()
    try:
        async with store.read() as session:
            return (await session.exec(select(ScheduledJob))).one()
    finally:
        await store.dispose()


async def job_outcome(database: Database) -> str | None:
    """The last outcome of the only scheduled job."""
    return (await the_job(database)).last_status


async def pass_its_time(database: Database, job: ScheduledJob) -> None:
    """A paused one-time wakeup's time passes (as the clock would, an hour on)."""
    assert job.state == "paused", job
    store = database.store()
    try:
        async with store.write() as session:
            row = await session.get(ScheduledJob, job.id)
            assert row is not None
            passed = utcnow() - timedelta(seconds=1)
            row.trigger_expr, row.next_run_at = passed.isoformat(), passed
            row.anchor_at = min(row.anchor_at, passed - timedelta(seconds=1))
            session.add(row)
    finally:
        await store.dispose()


async def due_now(database: Database) -> None:
    """The only job, a one-time wakeup an hour away, comes due: paused with the
    CLI, its time passes, resumed with the CLI (it runs at once)."""
    job = await the_job(database)
    await switchboard(database, "jobs", "pause", str(job.id))
    await pass_its_time(database, await the_job(database))
    await switchboard(database, "jobs", "resume", str(job.id))


async def test_a_job_resumed_with_the_cli_fires_without_waiting_for_the_scheduler_sync(
    database: Database, tmp_path: Path
) -> None:
    """A one-time wakeup paused with the CLI past its time, then resumed, runs
    at once: the service syncs its schedule when it sees the change (SQLite:
    within the recovery sweep's few seconds; PostgreSQL: the notice), not
    after `sync_seconds` (here longer than the test). (An hour away when
    paused, so no clock races the CLI; its time passes while paused.)"""
    async with running(
        database,
        tmp_path,
        SWITCHBOARD__SCHEDULER__MAX_JOBS__GUEST="5",
        SWITCHBOARD__SCHEDULER__SYNC_SECONDS="600",
    ) as it:
        it.model.responder = with_tools
        assert await it.chat.say("wake me in 1 hour") == "noted"
        job = await the_job(database)
        await switchboard(database, "jobs", "pause", str(job.id))
        assert await job_outcome(database) is None
        assert job.next_run_at is not None
        await pass_its_time(database, await the_job(database))  # its time passes, paused
        calls = it.model.request_count
        await switchboard(database, "jobs", "resume", str(job.id))  # due: it runs at once
        await wait_for(lambda: it.model.request_count > calls, "the wakeup", it.service, 30)
        await wait_for(lambda: len(replies_in(it.chat.slack, "D1")) == 2, "its reply", it.service)
        assert "say hi" in replies_in(it.chat.slack, "D1")[-1]


async def test_a_budget_set_with_the_cli_counts_from_the_next_wakeup(
    database: Database, tmp_path: Path
) -> None:
    """A wakeup is its owner's next message: the budget set with the CLI
    after the owner's last message counts there too (no LLM call). (The
    wakeup is an hour away, then comes due: no clock races the CLI.)"""
    async with running(database, tmp_path, SWITCHBOARD__SCHEDULER__MAX_JOBS__GUEST="5") as it:
        it.model.responder = with_tools
        assert await it.chat.say("hello") == "re: hello"
        assert await it.chat.say("wake me in 1 hour") == "noted"  # the limit: cached here
        await admin(database, "budget", "set", "slack:U1", "1")
        assert await job_outcome(database) is None
        calls = it.model.request_count
        await due_now(database)
        for _ in range(300):
            if await job_outcome(database) is not None:
                break
            await asyncio.sleep(0.1)
        assert await job_outcome(database) == "refused", it.service.log_text
        assert it.model.request_count == calls  # refused before any LLM call


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
async def test_a_memory_saved_through_another_instance_is_recalled_at_the_next_message(
    pg: Database, tmp_path: Path
) -> None:
    """Instance A knows the user has no memories (cached for
    NO_MEMORIES_TTL_S); the user saves one through instance B; A recalls it
    at the user's very next message (the save's notice), not after the TTL."""
    (tmp_path / "a").mkdir()
    async with running(pg, tmp_path / "a") as it:
        it.model.responder = with_tools
        env = service_env(pg, it.model, it.chat.slack, port := free_port())
        (tmp_path / "b").mkdir()
        other = Service(env, tmp_path / "b", port)
        await other.start()
        try:
            assert await it.chat.say("hello") == "re: hello"  # A: no memories
            async with aiohttp.ClientSession() as http:
                via_b = SlackSender(http, [other.url])
                # another conversation: not in the next message's history
                saved = await it.chat.say("remember my tea is oolong", via=via_b, dm="D2")
                assert saved == "noted"
            assert await it.chat.say("which tea do I drink") == "re: which tea do I drink"
        finally:
            await other.stop()
        asked = it.model.requests[-1]
        assert last_user_text(asked.body) == "which tea do I drink"
        assert "my tea is oolong" in json.dumps(asked.body), it.service.log_text


async def cut_every_connection(db: Database) -> None:
    """What a database restart does to the clients' connections."""
    store = db.store()
    try:
        async with store.write() as session:
            cut = text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND application_name = :mine"
            )  # this test's schema only: other tests run beside it (xdist)
            result = await session.exec(cut, params={"mine": f"switchboard:{db.schema}"})  # type: ignore[call-overload]
            assert any(row[0] for row in result.all()), "no connection of the service to cut"
    finally:
        await store.dispose()
