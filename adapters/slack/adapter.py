"""The Slack adapter: slack-bolt's `AsyncApp` in front of the pipeline.

Transports (`[slack] mode`):
- `socket`: Socket Mode (SLACK_APP_TOKEN, scope `connections:write`); no public
  URL. The WebSocket URL comes from `apps.connections.open` on
  `slack.api_base_url`.
- `http`: the Events API at `POST /slack/events` and slash commands at
  `POST /slack/commands` on the service's web server (`[server]`). Bolt checks
  every request's `v0` HMAC-SHA256 signature with SLACK_SIGNING_SECRET (5-minute
  window, constant-time compare); a bad one gets 401 and nothing runs.

Either way bolt runs our listeners before it answers (`process_before_response`).
A listener parses the event and hands the message to the pipeline, waiting only
until the pipeline has stored it in its inbox: Slack's acknowledgement (the HTTP
200, or the Socket Mode ack) goes out only for a stored message, and when the
database cannot take it the listener fails, bolt answers 500 (or does not ack)
and Slack delivers it again. Files are downloaded after that
(`fetch_files`, called by the pipeline), so the 3-second acknowledgement never
waits for files or the LLM.

Events (subscribe to `message.im`, `message.channels`, `message.groups`,
`message.mpim` and `app_mention`; bot scopes `chat:write`, `im:history`,
`channels:history`, `groups:history`, `mpim:history`, `app_mentions:read`,
`files:read`, `commands`): see `parse.py` for what becomes a message, which
thread the reply goes to, and why a message that arrives both as `message` and
as `app_mention` is answered once.

Slash commands: ONE command, `/switchboard <name> args` (`slack.command`), not
one per spec. Slack apps cannot register commands at runtime: each one must be
created by hand in the app settings, so one command keeps new core commands
working without touching the Slack app, and avoids clashes with Slack's own and
other apps' commands (`/help`, `/new`, ...). An operator who does create
`/budget` etc. pointing at us gets them too (any other command name maps to
`/<name> args`). Commands are acknowledged at once and answered through the
command's `response_url`: ephemeral when the reply is private, in the channel
otherwise. Slash commands cannot be used in threads (Slack's rule); inside a
thread, "@bot /new" works as a message.

Buttons (`Reply.buttons`, e.g. Confirm / Cancel): an `actions` block under the
last part (`buttons.py`). A press arrives as a `block_actions` interaction (POST
`/slack/interactivity`, or a Socket Mode `interactive` envelope); its command goes
to the pipeline as the presser's message, and Slack is acknowledged once it is
stored (enable Interactivity in the app settings, with the request URL
`/slack/interactivity` in http mode).

Typing: Slack has no typing indicator for bots in channels. With
`slack.typing_status` set, the thread gets that status through
`assistant.threads.setStatus` (apps with the "Agents & AI Apps" feature; Slack
clears it when the reply is posted, or after two minutes); a channel where
Slack refuses it is not asked again. Empty (the default): nothing is shown.

Private replies to a message (not a slash command) go to the thread like any
other: a `Reply` does not say who asked, which `chat.postEphemeral` needs.

Streaming (`open_stream`, `streaming.py`): a reply in a thread streams natively
(`chat.startStream` / `appendStream` / `stopStream`) to the asker; elsewhere it
is posted, then edited. `send` edits those messages (`Reply.drafts`) into the
final reply's parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack.buttons import ACTION_ID, blocks, parse_press
from adapters.slack.delivery import Poster, Sleep, api_error
from adapters.slack.files import FileFetcher, describe
from adapters.slack.parse import PLATFORM, parse_command, parse_event
from adapters.slack.render import render
from adapters.slack.requests import (
    COMMANDS_PATH,
    EVENTS_PATH,
    INTERACTIVITY_PATH,
    rejected,
    shape_problem,
    signature_ok,
)
from adapters.slack.startup import TOKEN_HINTS, TOKEN_REJECTED, bolt_logger
from adapters.slack.streaming import Streams
from bot.config import SlackSettings
from bot.errors import AdapterError, DeliveryFailed, StartupError
from bot.ports import Core, Leadership, LiveMessage, Route, SendProgress, hand_over
from bot.types import BotIdentity, IncomingMessage, Reply, Target

log = logging.getLogger("switchboard.slack")
BOLT_LOGGER = "switchboard.slack.bolt"
LEADER_GRACE_S = 3.0
"""How long `start` waits to be elected Socket Mode leader before standing by."""

CONNECT_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
_BOLT_LOG = bolt_logger(BOLT_LOGGER)


class NotTaken(AdapterError):
    """The pipeline could not store a message: Slack must deliver it again."""


class SlackAdapter:
    platform = PLATFORM

    def __init__(
        self,
        settings: SlackSettings,
        *,
        bot_token: str,
        app_token: str | None = None,
        signing_secret: str | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self._token = bot_token
        self._app_token = app_token
        self.client = AsyncWebClient(token=bot_token, base_url=settings.api_base_url)
        self.bolt = AsyncApp(
            # Bolt names its loggers after the app and resets their levels: a name
            # of its own keeps it from silencing our "switchboard" loggers.
            name=BOLT_LOGGER,
            logger=_BOLT_LOG,
            client=self.client,
            signing_secret=signing_secret or "",
            request_verification_enabled=settings.mode == "http",
            process_before_response=True,
        )
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.poster = Poster(self.client, sleep=sleep)
        self.streams = Streams(self.client, sleep=sleep)
        self.identity: BotIdentity | None = None
        self.team_id: str | None = None
        self._core: Core | None = None
        self._http: aiohttp.ClientSession | None = None
        self._files: FileFetcher | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._leader: Leadership | None = None
        self._socket_keeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._no_status: set[str] = set()
        self._register()

    # -- lifecycle ------------------------------------------------------------

    async def start(self, core: Core) -> None:
        self._http = aiohttp.ClientSession()
        self.client.session = self._http  # one connection pool for every Web API call
        step, secret = "SLACK_BOT_TOKEN (auth.test)", "SLACK_BOT_TOKEN"
        try:
            auth = await self.client.auth_test()
            self.identity = BotIdentity(PLATFORM, str(auth["user_id"]), auth.get("user"))
            self.team_id = self.streams.team_id = auth.get("team_id")
            self._files = FileFetcher(
                self.client,
                self._http,
                self._token,
                self.settings.max_file_bytes,
                self.settings.api_base_url,
            )
            self._core = core
            if self.settings.mode == "socket":
                step, secret = "SLACK_APP_TOKEN (apps.connections.open)", "SLACK_APP_TOKEN"
                await self._start_socket(core)
        except SlackApiError as exc:
            await self._close()
            _, error = api_error(exc)
            hint = TOKEN_HINTS[secret] if error in TOKEN_REJECTED else None
            raise StartupError(f"Slack refused {step}: {error}", hint) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self._close()
            raise StartupError(
                f"cannot reach Slack at {self.settings.api_base_url}: {type(exc).__name__}",
                "Check the network and [slack] api_base_url.",
            ) from None
        except BaseException:
            await self._close()
            raise
        log.info(
            "slack.ready mode=%s bot_user=%s team=%s",
            self.settings.mode,
            self.identity.user_id,
            self.team_id,
        )

    async def _start_socket(self, core: Core) -> None:
        """Socket Mode, one instance at a time: the leader of
        "slack-socket:<team>" connects; the others stand by and one takes over
        when the leader dies. A lone instance is elected at once and connects
        before `start` returns (so a bad app token is a startup error)."""
        self._leader = core.leadership(f"slack-socket:{self.team_id}")
        try:
            await asyncio.wait_for(self._leader.wait(), LEADER_GRACE_S)
        except TimeoutError:
            log.info("slack.socket_standby: another instance holds the Socket Mode connection")
        else:
            await self._connect_socket()
        self._socket_keeper = asyncio.create_task(self._keep_socket(), name="slack-socket")

    async def _keep_socket(self) -> None:
        """Connect while leader; close when leadership is lost; connect again when
        elected again."""
        assert self._leader is not None
        while True:
            if self._socket is None:
                await self._leader.wait()
                try:
                    await self._connect_socket()
                except Exception as exc:
                    log.warning("slack.socket_connect_failed: %s; retrying", exc)
                    await asyncio.sleep(LEADER_GRACE_S)
                    continue
            await self._leader.lost()
            log.warning("slack.socket_closed: leadership lost")
            if self._socket is not None:
                await self._socket.close_async()  # type: ignore[no-untyped-call]
                self._socket = None

    async def _connect_socket(self) -> None:
        assert self._app_token is not None
        # Opening the URL here (not in the SDK's reconnect loop) turns a bad
        # SLACK_APP_TOKEN into a startup error instead of endless retries.
        opened = await self.client.apps_connections_open(app_token=self._app_token)
        handler = AsyncSocketModeHandler(self.bolt, self._app_token, web_client=self.client)
        handler.client.wss_uri = str(opened["url"])
        self._socket = handler
        await asyncio.wait_for(handler.connect_async(), CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]

    async def ready(self) -> bool:
        """HTTP mode: started. Socket Mode: the WebSocket connected, or standing
        by while another instance holds it."""
        if self._core is None:
            return False
        if self.settings.mode != "socket":
            return True
        if self._socket is None:
            return self._leader is not None and not self._leader.held
        connected: bool = await self._socket.client.is_connected()
        return connected

    async def stop(self) -> None:
        if self._socket_keeper is not None:
            self._socket_keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._socket_keeper
            self._socket_keeper = None
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self._close()

    async def _close(self) -> None:
        self._core = None
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._http is not None:
            await self._http.close()
            self._http = None
            self.client.session = None

    async def idle(self) -> None:
        """Wait until every event handed over so far has been fully handled."""
        while self._tasks:
            await asyncio.gather(*set(self._tasks), return_exceptions=True)

    # -- HTTP transport ---------------------------------------------------------

    def routes(self) -> Sequence[Route]:
        if self.settings.mode != "http":
            return []
        return [
            Route("POST", EVENTS_PATH, self._http_request),
            Route("POST", COMMANDS_PATH, self._http_request),
            Route("POST", INTERACTIVITY_PATH, self._http_request),
        ]

    async def _http_request(self, request: web.Request) -> web.StreamResponse:
        # What is refused anyway is refused first (cheaply, and never with a 503
        # that Slack would deliver again): a bad signature, then a bad shape.
        body = await request.read()
        if self._verifier is None or not signature_ok(self._verifier, body, request.headers):
            return rejected(request, 401, "bad or missing signature")
        if problem := shape_problem(request.path, body):
            return rejected(request, 400, problem)
        if self._core is None or self.identity is None:  # not started (or stopping)
            return web.json_response({"error": "not ready"}, status=503)
        retry = request.headers.get("X-Slack-Retry-Num")
        if retry:
            reason = request.headers.get("X-Slack-Retry-Reason", "")
            log.info("slack.redelivery retry=%s reason=%s", retry, reason)
        response = await self.bolt.async_dispatch(await to_bolt_request(request))
        if response.status == 404:  # signed, well formed, and nothing we act on
            return web.Response(status=200)
        return await to_aiohttp_response(response)

    # -- events -----------------------------------------------------------------

    def _register(self) -> None:
        async def on_event(body: dict[str, Any]) -> None:
            await self._on_event(body)

        async def on_command(ack: AsyncAck, command: dict[str, Any]) -> None:
            await self._on_command(ack, command)

        async def ignore() -> None:
            return None

        async def ack_only(ack: AsyncAck) -> None:
            await ack()

        async def on_press(ack: AsyncAck, body: dict[str, Any]) -> None:
            await self._on_press(ack, body)

        async def on_error(error: Exception) -> None:
            # bolt answers 500 either way (Slack delivers the request again).
            if isinstance(error, NotTaken):  # expected (shutting down, database down):
                log.warning("slack.not_taken %s", error)  # no traceback at ERROR
            else:
                log.error(
                    "slack.listener_failed %s: %s", type(error).__name__, error, exc_info=error
                )

        self.bolt.error(on_error)
        self.bolt.event("message")(on_event)
        self.bolt.event("app_mention")(on_event)
        self.bolt.event(re.compile(".*"))(ignore)  # acknowledge the rest: no redeliveries
        self.bolt.command(re.compile("^/"))(on_command)
        self.bolt.action(ACTION_ID)(on_press)  # our reply buttons (buttons.py)
        # Other actions, shortcuts and modals: nothing here uses them; acknowledge
        # them so Slack shows no error to whoever clicked.
        self.bolt.action(re.compile(".*"))(ack_only)
        self.bolt.shortcut(re.compile(".*"))(ack_only)
        self.bolt.view(re.compile(".*"))(ack_only)

    async def _on_event(self, body: Mapping[str, Any]) -> None:
        """Hand the event's message to the pipeline; return once it is stored.
        Raises when it could not be (bolt answers 500: Slack delivers it again)."""
        core = self._core
        if self.identity is None or core is None:
            raise NotTaken("the Slack adapter is not running")
        msg = parse_event(body, self.identity)
        if msg is None:
            return
        log.debug(
            "slack.event event=%s key=%s channel=%s",
            body.get("event_id"),
            msg.event_id,
            msg.platform_channel_id,
        )
        self.streams.asked(msg)
        if not await hand_over(core, msg, self._tasks):
            raise NotTaken(f"message {msg.event_id} could not be stored; Slack will retry")

    async def _on_press(self, ack: AsyncAck, body: Mapping[str, Any]) -> None:
        """A press on one of our buttons: its command goes to the pipeline as the
        presser's message; Slack is acknowledged once it is stored."""
        core = self._core
        msg = parse_press(body, self.identity) if self.identity is not None else None
        if core is not None and msg is not None and not await hand_over(core, msg, self._tasks):
            raise NotTaken(f"button press {msg.event_id} could not be stored; Slack will retry")
        await ack()

    async def fetch_files(self, msg: IncomingMessage) -> IncomingMessage:
        """Download what the agent may read (called by the pipeline after intake)."""
        if not msg.attachments or self._files is None or not self._wanted(msg):
            return msg
        msg = await self._files.fill(msg)
        log.info("slack.files key=%s %s", msg.event_id, describe(msg.attachments))
        return msg

    def _wanted(self, msg: IncomingMessage) -> bool:
        """Whether the pipeline will act on it (so its files are worth fetching)."""
        return msg.addressed or not self.settings.require_mention

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- slash commands -----------------------------------------------------------

    async def _on_command(self, ack: AsyncAck, payload: Mapping[str, Any]) -> None:
        """Acknowledge the command once the pipeline has stored it, and answer it
        through its `response_url` in the background."""
        core = self._core
        msg = parse_command(payload, self.settings.command)
        if core is None or msg is None:
            await ack()
            return
        accepted = asyncio.Event()
        task = self._spawn(self._answer_command(core, msg, payload, accepted.set))
        waiter = asyncio.create_task(accepted.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not accepted.is_set() and task.done() and (task.cancelled() or task.exception()):
            raise NotTaken(f"command {payload.get('command')} could not be stored")
        await ack()

    async def _answer_command(
        self,
        core: Core,
        msg: IncomingMessage,
        payload: Mapping[str, Any],
        accepted: Callable[[], None],
    ) -> None:
        url = payload.get("response_url")
        outcome = await core.handle(msg, deliver=False, on_accepted=accepted)
        for reply in outcome.replies:
            try:
                await self._respond(str(url or ""), reply)
            except Exception as exc:  # recorded like any undelivered reply
                await core.record_delivery_failure(reply, exc)

    async def _respond(self, response_url: str, reply: Reply) -> None:
        if not response_url:
            raise DeliveryFailed("the command came without a response_url")
        webhook = AsyncWebhookClient(url=response_url, session=self._http)
        kind = "ephemeral" if reply.private else "in_channel"
        chunks = render(reply.text)
        for index, chunk in enumerate(chunks):
            buttons = blocks(chunk, reply.buttons) if index == len(chunks) - 1 else None
            response = await webhook.send(text=chunk, response_type=kind, blocks=buttons)
            if response.status_code != 200:
                raise DeliveryFailed(f"response_url answered HTTP {response.status_code}")

    # -- delivery ---------------------------------------------------------------

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]:
        """Post the reply's parts; with `reply.drafts` (it was streamed) edit
        those messages into the parts instead, and delete drafts left over."""
        chunks = render(reply.text)
        target = reply.target
        thread = target.thread_id or target.reply_to_message_id
        buttons = blocks(chunks[-1], reply.buttons) if reply.buttons and chunks else None
        return await self.poster.post(
            target.channel_id, chunks, thread, progress, buttons, reply.drafts
        )

    def open_stream(self, target: Target) -> LiveMessage | None:
        """A live view of a reply to `target` (`streaming.py`); no I/O here."""
        return self.streams.open(target)

    async def show_typing(self, target: Target) -> None:
        status = self.settings.typing_status
        thread = target.thread_id
        if not status or not thread or target.channel_id in self._no_status:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=target.channel_id, thread_ts=thread, status=status
            )
        except SlackApiError as exc:
            _, error = api_error(exc)
            if error != "ratelimited":
                self._no_status.add(target.channel_id)
                log.info("slack.status_unavailable channel=%s error=%s", target.channel_id, error)
