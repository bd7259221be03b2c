"""An operator's change made with the CLI (another process) counts from the
running service's very next message, although the service caches accounts
and budget limits: the real `switchboard run` as a subprocess (Slack over
HTTP, the fake model) and the real `switchboard admin` commands, on SQLite and
on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import text

from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack
from tests.paths import REPO_ROOT
from tests.pipeline.test_crash_recovery import dm_event, replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = pytest.mark.timeout(180)

USED_UP = "used up your token allowance"


async def admin(database: Database, *args: str) -> str:
    """`switchboard admin …` in a process of its own, on the service's database."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(REPO_ROOT),
        "SWITCHBOARD__DATABASE__URL": database.url,
    }
    if database.schema:
        env["SWITCHBOARD__DATABASE__SCHEMA_NAME"] = database.schema
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "admin",
        *args,
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


class Chat:
    """One Slack DM with the running service: say something, wait for the answer."""

    def __init__(self, sender: SlackSender, slack: FakeSlack, service: Service) -> None:
        self.sender, self.slack, self.service = sender, slack, service
        self.said = 0

    async def say(self, text: str) -> str:
        self.said += 1
        before = len(replies_in(self.slack, "D1"))
        await self.sender.deliver(dm_event("D1", "U1", text, f"1700000001.{self.said:06d}"))
        await wait_for(
            lambda: len(replies_in(self.slack, "D1")) > before,
            f"the answer to {text!r}",
            self.service,
        )
        return replies_in(self.slack, "D1")[-1]


async def test_a_budget_set_with_the_cli_counts_from_the_next_message(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        env = service_env(database, model, slack, port := free_port())  # guests: unlimited
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                chat = Chat(SlackSender(http, [service.url]), slack, service)
                assert await chat.say("hello") == "re: hello"
                assert await chat.say("again") == "re: again"  # known here: cached
                shown = await admin(database, "budget", "set", "slack:U1", "1")
                assert "limit   1 tokens a month" in shown or "1 token" in shown, shown
                calls = model.request_count
                assert USED_UP in await chat.say("one more")
                assert model.request_count == calls  # refused before any LLM call
                await admin(database, "budget", "set", "slack:U1", "unlimited")
                assert await chat.say("and now") == "re: and now"
        finally:
            await service.stop()


async def test_a_role_set_with_the_cli_counts_from_the_next_message(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        # guests may spend freely, users not at all
        extra = {"SWITCHBOARD__BUDGETS__USER": "1"}
        env = service_env(database, model, slack, port := free_port(), **extra)
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                chat = Chat(SlackSender(http, [service.url]), slack, service)
                assert await chat.say("hello") == "re: hello"
                assert "is now user (was guest)" in await admin(
                    database, "role", "slack:U1", "user"
                )
                calls = model.request_count
                assert USED_UP in await chat.say("one more")
                assert model.request_count == calls
                assert "is now guest" in await admin(database, "role", "slack:U1", "guest")
                assert await chat.say("and now") == "re: and now"
        finally:
            await service.stop()


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set")
async def test_a_change_made_while_the_database_cut_every_connection_still_counts(
    pg: Database, tmp_path: Path
) -> None:
    """PostgreSQL: the service's connections, the one listening for notices
    among them, are cut (a database restart, a failover); the notice of a
    change made meanwhile is lost, and must not be needed."""
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        env = service_env(pg, model, slack, port := free_port())
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                chat = Chat(SlackSender(http, [service.url]), slack, service)
                assert await chat.say("hello") == "re: hello"
                await cut_every_connection(pg)
                await wait_for(
                    lambda: any("control.listener_lost" in line for line in service.logs),
                    "the lost listener noticed",
                    service,
                )
                await admin(pg, "budget", "set", "slack:U1", "1")
                calls = model.request_count
                assert USED_UP in await chat.say("one more")
                assert model.request_count == calls
        finally:
            await service.stop()
    listening = [line for line in service.logs if "control.listening" in line]
    assert len(listening) >= 2, service.log_text  # and it listens again


async def cut_every_connection(db: Database) -> None:
    """What a database restart does to the clients' connections."""
    store = db.store()
    try:
        async with store.write() as session:
            cut = text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            )
            await session.exec(cut)  # type: ignore[call-overload]
    finally:
        await store.dispose()
