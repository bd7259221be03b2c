"""One soak variant from start to verdict: the fakes, the real service as
subprocesses (two instances on PostgreSQL, one on SQLite), the traffic and
the faults for `minutes`, then the faults stop, the system drains (bounded),
the services stop and the facts are judged.

Environment (see `python -m tests.soak --help`): SOAK_MINUTES (default 10),
SOAK_SEED (default: drawn, and printed so a run can be replayed),
SOAK_DATABASE = postgres | sqlite | both (default both; PostgreSQL needs
SWITCHBOARD_TEST_POSTGRES_URL and gets a schema of its own, dropped after
unless SOAK_KEEP=1), SOAK_DIR (where logs and reports go; default a new
directory under the system's temporary one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import TOKEN as DISCORD_TOKEN
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.fakes.telegram import TOKEN as TELEGRAM_TOKEN
from tests.fakes.telegram import FakeTelegram
from tests.service_rig import Service, SlackSender, free_port
from tests.soak import checks, collect, report
from tests.soak.facts import Facts
from tests.soak.faults import PlatformChaos, ProcessFaults, schedule
from tests.soak.model import TOKEN, ModelFaults, SoakModel
from tests.soak.traffic import Planned, Senders, plan

GUEST_ALLOWANCE = 12_000
"""Every soak user is a new guest: a few answers each, so heavy talkers run out."""
ALLOWANCES: dict[str, int | None] = {"guest": GUEST_ALLOWANCE, "user": 200_000}
TELEGRAM_SECRET = "soak-webhook-secret"
DRAIN_S = 90.0
"""At most this long for the system to finish its work once the faults stop."""
START_TIMEOUT_S = 150.0
"""A start of `switchboard run` took 25-90 s on a loaded 2-core machine."""
STALLED_S = 30.0
"""The drain ends early when what it waits for has not changed for this long."""
TAIL_S = 10.0
"""No new message in the last seconds of the soak (the drain follows anyway)."""


@dataclass(frozen=True)
class Variant:
    name: str
    database: str
    instances: int
    minutes: float
    seed: int
    directory: Path


def config_text(database: Database, model: str, slack: str, telegram: str, discord: str) -> str:
    schema = f'schema_name = "{database.schema}"\n' if database.schema else ""
    return f"""# written by tests/soak: the service as the soak runs it
[database]
url = "{database.url}"
{schema}
[llm]
base_url = "{model}"
max_retries = 2
timeout_seconds = 60

[budgets]
guest = {GUEST_ALLOWANCE}

[scheduler.max_jobs]
guest = 5

[inbox]
lease_seconds = 5
sweep_seconds = 1
drain_seconds = 5

[streaming]
interval_seconds = 0.5

[logging]
level = "INFO"
format = "json"

[slack]
enabled = true
mode = "http"
api_base_url = "{slack}"

[telegram]
enabled = true
mode = "webhook"
webhook_url = "https://soak.invalid/telegram/webhook"
api_base_url = "{telegram}"

[discord]
enabled = true
api_base_url = "{discord}"
sync_commands = false
"""


def instance_env(port: int, shard: tuple[int, int] | None) -> dict[str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
        "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
        "DISCORD_BOT_TOKEN": DISCORD_TOKEN,
        "SWITCHBOARD__SERVER__PORT": str(port),
    }
    if shard is not None:
        env["SWITCHBOARD__DISCORD__SHARD_ID"] = str(shard[0])
        env["SWITCHBOARD__DISCORD__SHARD_COUNT"] = str(shard[1])
    return env


async def _open_work(database: Database, senders: Senders, planned: list[Planned]) -> str | None:
    """What still keeps the soak from being drained (None: nothing)."""
    if len(senders.sent) < len(planned):
        return f"{len(planned) - len(senders.sent)} messages not sent yet"
    prefix = f'"{database.schema}".' if database.schema else ""
    engine = create_async_engine(database.url)
    try:
        async with engine.connect() as conn:
            busy = (
                await conn.execute(
                    text(
                        f"SELECT (SELECT count(*) FROM {prefix}inbox WHERE state IN "
                        f"('pending', 'running')) + (SELECT count(*) FROM {prefix}outbox "
                        f"WHERE state = 'pending') + (SELECT count(*) FROM "
                        f"{prefix}scheduled_jobs WHERE running_since IS NOT NULL)"
                    )
                )
            ).scalar_one()
            payloads = (await conn.execute(text(f"SELECT payload FROM {prefix}inbox"))).all()
            due = (
                await conn.execute(
                    text(
                        f"SELECT count(*) FROM {prefix}scheduled_jobs WHERE state = 'active' "
                        f"AND next_run_at IS NOT NULL AND next_run_at < :now"
                    ),
                    {"now": _now_param(database)},
                )
            ).scalar_one()
    finally:
        await engine.dispose()
    if busy:
        return f"{busy} inbox, outbox or scheduled rows unfinished"
    if due:
        return f"{due} wakeups due and not fired"
    stored = {t for (payload,) in payloads for t in TOKEN.findall(str(payload))}
    missing = [s for s in senders.sent if s.accepted and s.planned.token not in stored]
    if missing:
        return f"{len(missing)} accepted messages not in the inbox (yet)"
    return None


def _now_param(database: Database) -> Any:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return now if database.schema else now.isoformat(" ", "microseconds")[:26]


async def run_variant(variant: Variant) -> tuple[bool, dict[str, Any], str]:
    """Runs one variant; returns (passed, the JSON report, the table)."""
    rng = random.Random(variant.seed)
    directory = variant.directory / variant.name
    directory.mkdir(parents=True, exist_ok=True)
    database = Database(variant.database, directory)
    if variant.database == "postgres":
        database.schema = f"soak_{secrets.token_hex(5)}"
    await database.create()
    seconds = variant.minutes * 60.0
    chaos = PlatformChaos(random.Random(rng.random()))
    model_faults = ModelFaults(random.Random(rng.random()))
    responder = SoakModel(model_faults, random.Random(rng.random()))
    planned = plan(
        rng.randrange(2**31), seconds - TAIL_S, wakeups_until=max(seconds - TAIL_S - 60.0, 5.0)
    )
    events = schedule(
        random.Random(rng.random()),
        seconds,
        variant.instances,
        postgres=variant.database == "postgres",
    )
    services: list[Service] = []
    try:
        async with (
            FakeAnthropic(api_key=TEST_API_KEY, responder=responder) as model,
            FakeSlack() as slack,
            FakeTelegram() as telegram,
            FakeDiscord() as discord,
            aiohttp.ClientSession() as http,
        ):
            model.flight_key = lambda body: "model"
            config = config_text(
                database, model.base_url, slack.api_url, telegram.base_url, discord.api_base_url
            )
            for index in range(variant.instances):
                cwd = directory / f"instance-{index}"
                cwd.mkdir(exist_ok=True)
                (cwd / "config.toml").write_text(config)
                port = free_port()
                shard = (index, variant.instances) if variant.instances > 1 else None
                env = instance_env(port, shard)
                services.append(Service(env, cwd, port, start_timeout=START_TIMEOUT_S))
            await asyncio.gather(*(s.start() for s in services))
            telegram.webhook_targets = [f"{s.url}/telegram/webhook" for s in services]
            slack.chaos = chaos.for_platform("slack")
            telegram.chaos = chaos.for_platform("telegram")
            discord.chaos = chaos.for_platform("discord")
            loop = asyncio.get_running_loop()
            started = loop.time()
            senders = Senders(
                SlackSender(http, [s.url for s in services]), telegram, discord, started
            )
            faults = ProcessFaults(services, database, model)
            traffic = asyncio.create_task(senders.play(planned))
            injecting = asyncio.create_task(faults.run(events, started))
            await asyncio.sleep(seconds)
            # The faults stop; what is left must finish.
            faults.stop()
            chaos.on = model_faults.on = False
            with contextlib.suppress(Exception):
                await asyncio.wait_for(injecting, 120.0)
            for service in services:
                if service.proc is None or service.proc.returncode is not None:
                    await faults.restart(service)
            drain_started = changed = loop.time()
            waiting_for: str | None = "?"
            while loop.time() - drain_started < DRAIN_S:
                left = await _open_work(database, senders, planned)
                if left != waiting_for:
                    waiting_for, changed = left, loop.time()
                if waiting_for is None or loop.time() - changed > STALLED_S:
                    break  # done, or nothing moves any more
                await asyncio.sleep(1.0)
            drained_in = loop.time() - drain_started
            traffic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await traffic
            await asyncio.sleep(1.0)  # replies sent as the drain ended are recorded
            for service in services:
                await service.stop()
            facts = Facts(checked_at=time.time())
            facts.messages = collect.messages(senders.sent)
            chats = {
                p.conversation.removeprefix("telegram:")
                for p in planned
                if p.platform == "telegram"
            }
            facts.bot_messages = collect.bot_messages(slack, telegram, discord, chats)
            facts.model_calls = list(responder.calls)
            for index, service in enumerate(services):
                facts.logs += collect.log_lines(f"instance-{index}", service.logs)
                (directory / f"instance-{index}.log").write_text("\n".join(service.logs) + "\n")
            listed = await collect.listed_failures(services[0].env, str(services[0].cwd))
            await collect.database_facts(database, ALLOWANCES, listed, facts)
            counts = {**chaos.counts, **model_faults.counts, **faults.counts}
    finally:
        for service in services:
            with contextlib.suppress(Exception):
                await service.stop(grace=10.0)
        if variant.database == "postgres" and not os.environ.get("SOAK_KEEP"):
            await database.drop()
    verdict = checks.judge(facts)
    report.write(variant.directory / f"facts-{variant.name}.json", dataclasses.asdict(facts))
    title = (
        f"soak {variant.name}: {variant.instances} instance(s), {variant.minutes:g} min, "
        f"seed {variant.seed}"
    )
    shown = report.table(title, verdict, counts)
    extra = {
        "seed": variant.seed,
        "minutes": variant.minutes,
        "instances": variant.instances,
        "messages_planned": len(planned),
        "model_calls": len(facts.model_calls),
        "drained_in_seconds": round(drained_in, 1),
        "drain_incomplete": waiting_for,
        "fault_journal": faults.journal,
        "directory": str(directory),
    }
    if waiting_for is not None:
        shown += f"\n(drain did not finish in {DRAIN_S:g} s: {waiting_for})"
    return verdict.ok, report.as_json(variant.name, verdict, counts, extra), shown


def variants(minutes: float, seed: int, which: str, directory: Path) -> list[Variant]:
    wanted = ("postgres", "sqlite") if which == "both" else (which,)
    out = []
    for name in wanted:
        if name == "postgres" and not POSTGRES_URL:
            if which == "both":
                print("SWITCHBOARD_TEST_POSTGRES_URL is not set: the PostgreSQL variant is skipped")
                continue
            raise SystemExit("SOAK_DATABASE=postgres needs SWITCHBOARD_TEST_POSTGRES_URL")
        instances = 2 if name == "postgres" else 1
        out.append(Variant(name, name, instances, minutes, seed, directory))
    return out
