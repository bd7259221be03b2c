"""Gathers the soak's `Facts`: from the senders and the fakes (what was
accepted, what each platform shows), from the fake model (what it was asked),
from the database (plain SQL on the service's tables, not its code), from
`switchboard admin inbox` (what an operator sees) and from the services' logs
(JSON lines)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import Database
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.paths import REPO_ROOT
from tests.soak.facts import (
    Account,
    BotMessage,
    Charge,
    Facts,
    InboxRow,
    LogLine,
    Message,
    RunRow,
    Wakeup,
)
from tests.soak.model import TOKEN
from tests.soak.traffic import Sent

_LISTED = re.compile(r"^\s*(\d+)\s+(\w+)\s+\d+\s+\d{4}-")


def messages(sent: Iterable[Sent]) -> list[Message]:
    return [
        Message(
            token=s.planned.token,
            conversation=s.planned.conversation,
            user=f"{s.planned.platform}:{s.planned.user}",
            order=s.order,
            accepted=s.accepted,
            kind=s.planned.kind,
            platform_id=s.platform_id,
        )
        for s in sent
    ]


def bot_messages(
    slack: FakeSlack, telegram: FakeTelegram, discord: FakeDiscord, telegram_chats: Iterable[str]
) -> list[BotMessage]:
    out = []
    for index, m in enumerate(slack.messages):
        channel = str(m["channel"])
        where = channel if channel.startswith("D") else f"{channel}/{m.get('thread_ts') or m['ts']}"
        out.append(BotMessage(f"slack:{where}", index, str(m.get("text") or "")))
    for chat in telegram_chats:
        for message_id, shown in telegram.shown(chat).items():
            out.append(BotMessage(f"telegram:{chat}", message_id, shown))
    for p in discord.posted:
        if not (p.deleted or p.ephemeral or p.loading):
            out.append(BotMessage(f"discord:{p.channel_id}", int(p.id), p.content))
    return out


def log_lines(instance: str, lines: Iterable[str]) -> list[LogLine]:
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if "Traceback" in line or " ERROR " in line:
                out.append(LogLine(instance, "ERROR", "unstructured", None, line))
            continue
        level = str(record.get("level") or "")
        text_ = str(record.get("message") or "")
        if record.get("exception"):
            text_ += " | " + str(record["exception"]).strip().splitlines()[-1]
        event = str(record.get("event") or record.get("logger") or "")
        out.append(LogLine(instance, level, event, record.get("run_id"), text_))
    return out


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


async def listed_failures(env: Mapping[str, str], cwd: str) -> set[int]:
    """Inbox ids `switchboard admin inbox` shows as failed, with an error."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "admin",
        "inbox",
        "--limit",
        "1000000",
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"switchboard admin inbox failed: {err.decode(errors='replace')}")
    listed: set[int] = set()
    lines = out.decode(errors="replace").splitlines()
    for index, line in enumerate(lines):
        found = _LISTED.match(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if found and found.group(2) == "failed" and following.strip().startswith("error:"):
            listed.add(int(found.group(1)))
    return listed


async def database_facts(
    database: Database, allowances: Mapping[str, int | None], listed: set[int], facts: Facts
) -> None:
    """Fill `facts` from the service's tables (`allowances`: role → allowance)."""
    prefix = f'"{database.schema}".' if database.schema else ""

    def q(sql: str) -> Any:
        return text(sql.replace("T.", prefix))

    engine = create_async_engine(database.url)
    try:
        async with engine.connect() as conn:
            inbox = await conn.execute(
                q(
                    "SELECT id, platform, state, error, run_id, finished_at, payload, event_id"
                    " FROM T.inbox"
                )
            )
            for id_, platform, state, error, run_id, finished, payload, event_id in inbox:
                data = _payload(payload)
                tokens = TOKEN.findall(str(data.get("text") or ""))
                user = f"{platform}:{data.get('platform_user_id')}"
                facts.inbox.append(
                    InboxRow(
                        tokens[0] if tokens else None,
                        user,
                        state,
                        error,
                        run_id,
                        _epoch(finished),
                        id_ in listed,
                        event_id,
                    )
                )
            runs = await conn.execute(q("SELECT id, status, error FROM T.runs"))
            facts.runs = [RunRow(*row) for row in runs]
            logs = await conn.execute(
                q(
                    "SELECT user_id, created_at, input_tokens + output_tokens + cache_read_tokens"
                    " + cache_write_tokens, run_id FROM T.token_logs"
                )
            )
            facts.charges = [Charge(u, _epoch(at) or 0.0, int(n), r) for u, at, n, r in logs]
            budgets = await conn.execute(
                q(
                    "SELECT b.user_id, l.platform, l.platform_user_id, b.used, b.overage,"
                    " b.granted, b.limit_mode, b.limit_tokens, u.role FROM T.budgets b"
                    " JOIN T.users u ON u.id = b.user_id"
                    " JOIN T.platform_links l ON l.user_id = b.user_id"
                )
            )
            for user_id, platform, puid, used, overage, granted, mode, tokens, role in budgets:
                base = (
                    None
                    if mode == "unlimited"
                    else tokens
                    if mode == "fixed"
                    else allowances.get(role)
                )
                allowance = None if base is None else base + int(granted or 0)
                facts.accounts.append(
                    Account(user_id, f"{platform}:{puid}", int(used), int(overage), allowance)
                )
            jobs = await conn.execute(
                q(
                    "SELECT prompt, trigger_kind, trigger_expr, state, run_count, running_since"
                    " FROM T.scheduled_jobs"
                )
            )
            for prompt, kind, expr, state, count, running in jobs:
                due = _epoch(expr) if kind == "date" else None
                for token in TOKEN.findall(prompt or ""):
                    facts.wakeups.append(Wakeup(token, due, state, int(count or 0)))
                facts.jobs_running += running is not None
            outbox = await conn.execute(q("SELECT state, run_id, error FROM T.outbox"))
            for state, run_id, error in outbox:
                if state == "pending":
                    facts.outbox_pending += 1
                elif state == "failed":
                    facts.outbox_failed.append((run_id, error or ""))
            failures = await conn.execute(q("SELECT conversation_key FROM T.delivery_failures"))
            facts.delivery_failures = [row[0] for row in failures]
    finally:
        await engine.dispose()
