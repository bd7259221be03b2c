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
slack_sdk. SQLite on aiosqlite in WAL mode, one connection, one write
transaction at a time.

Configuration comes from the same environment variables the service reads
(`SLACK_SIGNING_SECRET`, `SLACK_BOT_TOKEN`, `ANTHROPIC_API_KEY`,
`SWITCHBOARD__LLM__BASE_URL`, `SWITCHBOARD__SLACK__API_BASE_URL`,
`SWITCHBOARD__SERVER__PORT`), plus `MINIMAL_BOT_DB` (a file path).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time

import aiosqlite
from aiohttp import web
from anthropic import AsyncAnthropic
from slack_sdk.web.async_client import AsyncWebClient

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events (event_id TEXT PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, conversation TEXT,"
    " role TEXT, text TEXT);"
    "CREATE INDEX IF NOT EXISTS messages_conversation ON messages (conversation, id);"
)


class MinimalBot:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db
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
        self.writing = asyncio.Lock()
        """One transaction at a time on the one connection."""

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
        async with self.writing:
            async with self.db.execute(
                "INSERT OR IGNORE INTO events VALUES (?)", (envelope["event_id"],)
            ) as cursor:
                new = cursor.rowcount
            await self.db.commit()
        if new:
            question = text.replace(mention, "").strip()
            task = asyncio.create_task(self.answer(event["channel"], thread, question))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.Response()

    async def answer(self, channel: str, thread: str | None, text: str) -> None:
        conversation = f"{channel}:{thread}" if thread else channel
        rows = await self.db.execute_fetchall(
            "SELECT role, text FROM messages WHERE conversation = ? ORDER BY id DESC LIMIT 40",
            (conversation,),
        )
        history = [{"role": role, "content": content} for role, content in reversed(list(rows))]
        history.append({"role": "user", "content": text})
        async with self.llm.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=1024,
            system="You are a helpful assistant.",
            messages=history,  # type: ignore[arg-type]
        ) as stream:
            reply = "".join([chunk async for chunk in stream.text_stream])
        async with self.writing:
            await self.db.executemany(
                "INSERT INTO messages (conversation, role, text) VALUES (?, ?, ?)",
                [(conversation, "user", text), (conversation, "assistant", reply)],
            )
            await self.db.commit()
        await self.slack.chat_postMessage(channel=channel, text=reply, thread_ts=thread)


async def main() -> None:
    db = await aiosqlite.connect(os.environ["MINIMAL_BOT_DB"])
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.executescript(SCHEMA)
    bot = MinimalBot(db)
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
        await db.close()


if __name__ == "__main__":
    asyncio.run(main())
