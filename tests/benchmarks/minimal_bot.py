"""The floor of the front-door benchmark: a minimal Slack bot doing the same
I/O as Switchboard for one message, and nothing else. Run as a process of its own
(`python -m tests.benchmarks.minimal_bot`) by `tests.benchmarks.frontdoor`,
which measures it exactly as it measures the service.

It answers a DM, and a channel message that @mentions it (its user id comes
from `auth.test` at startup) in the message's thread, a top-level one starting
a thread under itself; the DM or the thread is the conversation.

Per Events API delivery: verify the signature (HMAC-SHA256, constant-time),
insert the event id into SQLite (a redelivery is a no-op), acknowledge; then,
in a task: read the conversation's last 40 messages, stream the answer with the
`anthropic` SDK, store both messages in one transaction, post the reply with
slack_sdk. On the database the service is given: SQLite on aiosqlite in WAL
mode, one connection, one write transaction at a time (in a file of its own,
`MINIMAL_BOT_DB`); PostgreSQL on an asyncpg pool as large as the service's
(tables of its own in the service's schema), each step a prepared statement.

Configuration comes from the same environment variables the service reads
(`SLACK_SIGNING_SECRET`, `SLACK_BOT_TOKEN`, `ANTHROPIC_API_KEY`,
`SWITCHBOARD__LLM__BASE_URL`, `SWITCHBOARD__SLACK__API_BASE_URL`,
`SWITCHBOARD__SERVER__PORT`, `SWITCHBOARD__DATABASE__URL` and
`SWITCHBOARD__DATABASE__SCHEMA_NAME`), plus `MINIMAL_BOT_DB` (a file path, for
SQLite).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from collections.abc import Awaitable, Callable

import aiosqlite
import asyncpg
from aiohttp import web
from anthropic import AsyncAnthropic
from slack_sdk.web.async_client import AsyncWebClient

from tests.benchmarks.floors import service_connections

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events (event_id TEXT PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, conversation TEXT,"
    " role TEXT, text TEXT);"
    "CREATE INDEX IF NOT EXISTS messages_conversation ON messages (conversation, id);"
)


PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS floor_events (event_id TEXT PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS floor_messages (id BIGSERIAL PRIMARY KEY, conversation TEXT,"
    " role TEXT, text TEXT);"
    "CREATE INDEX IF NOT EXISTS floor_messages_conversation"
    " ON floor_messages (conversation, id);"
)


class SqliteRows:
    """The bot's three steps on one aiosqlite connection, a write at a time."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db
        self.writing = asyncio.Lock()
        """One transaction at a time on the one connection."""

    async def first(self, event_id: str) -> bool:
        async with self.writing:
            async with self.db.execute(
                "INSERT OR IGNORE INTO events VALUES (?)", (event_id,)
            ) as cursor:
                new = cursor.rowcount
            await self.db.commit()
        return bool(new)

    async def history(self, conversation: str) -> list[tuple[str, str]]:
        rows = await self.db.execute_fetchall(
            "SELECT role, text FROM messages WHERE conversation = ? ORDER BY id DESC LIMIT 40",
            (conversation,),
        )
        return [(role, text) for role, text in rows]

    async def store(self, conversation: str, text: str, reply: str) -> None:
        async with self.writing:
            await self.db.executemany(
                "INSERT INTO messages (conversation, role, text) VALUES (?, ?, ?)",
                [(conversation, "user", text), (conversation, "assistant", reply)],
            )
            await self.db.commit()


class PostgresRows:
    """The same steps on an asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def first(self, event_id: str) -> bool:
        status = await self.pool.execute(
            "INSERT INTO floor_events VALUES ($1) ON CONFLICT DO NOTHING", event_id
        )
        return bool(status.endswith(" 1"))

    async def history(self, conversation: str) -> list[tuple[str, str]]:
        rows = await self.pool.fetch(
            "SELECT role, text FROM floor_messages WHERE conversation = $1"
            " ORDER BY id DESC LIMIT 40",
            conversation,
        )
        return [(row[0], row[1]) for row in rows]

    async def store(self, conversation: str, text: str, reply: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                "INSERT INTO floor_messages (conversation, role, text) VALUES ($1, $2, $3)",
                [(conversation, "user", text), (conversation, "assistant", reply)],
            )


class MinimalBot:
    def __init__(self, rows: SqliteRows | PostgresRows) -> None:
        self.rows = rows
        self.secret = os.environ["SLACK_SIGNING_SECRET"].encode()
        self.llm = AsyncAnthropic(
            api_key=os.environ["ANTHROPIC_API_KEY"],
            base_url=os.environ["SWITCHBOARD__LLM__BASE_URL"],
            max_retries=0,
        )
        self.slack = AsyncWebClient(
            token=os.environ["SLACK_BOT_TOKEN"],
            base_url=os.environ["SWITCHBOARD__SLACK__API_BASE_URL"],
        )
        self.user_id = ""
        """Ours, from `auth.test`: a channel message mentioning it is answered."""
        self.tasks: set[asyncio.Task[None]] = set()

    def signed(self, request: web.Request, body: bytes) -> bool:
        ts = request.headers.get("X-Slack-Request-Timestamp", "")
        if not ts.isdigit() or abs(time.time() - int(ts)) > 300:
            return False
        base = b"v0:" + ts.encode() + b":" + body
        digest = "v0=" + hmac.new(self.secret, base, hashlib.sha256).hexdigest()
        return hmac.compare_digest(digest, request.headers.get("X-Slack-Signature", ""))

    async def events(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self.signed(request, body):
            return web.Response(status=401)
        envelope = json.loads(body)
        if envelope.get("type") == "url_verification":
            return web.json_response({"challenge": envelope["challenge"]})
        event = envelope.get("event", {})
        if event.get("type") != "message" or event.get("bot_id") or event.get("subtype"):
            return web.Response()
        direct = event.get("channel_type") == "im"
        mention = f"<@{self.user_id}>"
        text = event.get("text", "")
        if not direct and mention not in text:
            return web.Response()
        thread = event.get("thread_ts") or (None if direct else event["ts"])
        if await self.rows.first(envelope["event_id"]):
            question = text.replace(mention, "").strip()
            task = asyncio.create_task(self.answer(event["channel"], thread, question))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.Response()

    async def answer(self, channel: str, thread: str | None, text: str) -> None:
        conversation = f"{channel}:{thread}" if thread else channel
        rows = await self.rows.history(conversation)
        history = [{"role": role, "content": content} for role, content in reversed(rows)]
        history.append({"role": "user", "content": text})
        async with self.llm.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=1024,
            system="You are a helpful assistant.",
            messages=history,  # type: ignore[arg-type]
        ) as stream:
            reply = "".join([chunk async for chunk in stream.text_stream])
        await self.rows.store(conversation, text, reply)
        await self.slack.chat_postMessage(channel=channel, text=reply, thread_ts=thread)


async def open_rows() -> tuple[SqliteRows | PostgresRows, Callable[[], Awaitable[None]]]:
    """The database the service is given (SQLite: a file of the bot's own), and
    how to close it."""
    url = os.environ.get("SWITCHBOARD__DATABASE__URL", "")
    if url.startswith("postgresql"):
        schema = os.environ.get("SWITCHBOARD__DATABASE__SCHEMA_NAME") or "public"
        pool = await asyncpg.create_pool(
            url.replace("postgresql+asyncpg://", "postgresql://"),
            min_size=1,
            max_size=service_connections(),
            server_settings={"search_path": schema},
        )
        await pool.execute(PG_SCHEMA)
        return PostgresRows(pool), pool.close
    db = await aiosqlite.connect(os.environ["MINIMAL_BOT_DB"])
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.executescript(SCHEMA)
    return SqliteRows(db), db.close


async def main() -> None:
    rows, close = await open_rows()
    bot = MinimalBot(rows)
    bot.user_id = str((await bot.slack.auth_test())["user_id"])
    app = web.Application()
    app.router.add_post("/slack/events", bot.events)
    app.router.add_get("/healthz", lambda _: web.Response(text="ok"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(os.environ["SWITCHBOARD__SERVER__PORT"])).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await close()


if __name__ == "__main__":
    asyncio.run(main())
