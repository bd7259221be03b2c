"""Protocols at the edges of the core: LLM providers, tools and adapters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TextIO, runtime_checkable

from bot.llm.capabilities import Feature
from bot.llm.types import ImageBlock, LLMRequest, LLMResponse, TextCallback

if TYPE_CHECKING:
    from aiohttp import web
from bot.types import ChatType, IncomingMessage, Outcome, Reply, Role, Target, Usage

log = logging.getLogger("switchboard.intake")


class Provider(Protocol):
    """An LLM backend. Raises `bot.errors.ProviderError` subclasses on failure.
    `supports(model, feature)`: whether `model` takes "images", "documents"
    (PDF document blocks) or "tools"; ask it through
    `bot.llm.capabilities.supports`, which also answers for objects without it."""

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse: ...

    def supports(self, model: str, feature: Feature) -> bool: ...

    async def aclose(self) -> None: ...


class Meter(Protocol):
    """Budget control around each LLM call of a run: `before_call` reserves
    tokens for the request (raising `BudgetExceeded` when the allowance cannot
    cover it) and returns the `max_tokens` the call may use; `after_call`
    settles the reservation to what the call really used (None: it failed),
    and says whether the call's token log was written with that charge (the
    run's turn then does not write it: `model` and `kind` are the span's).
    `role` is the user's role as `before_call` last found it: one changed while
    the run goes on (an operator's) shows there from the next call."""

    role: Role

    async def before_call(self, request: LLMRequest) -> int: ...

    async def after_call(self, usage: Usage | None, model: str = "", kind: str = "llm") -> bool: ...


Effect = Literal["read", "private_write", "external"]
"""What a tool does beyond answering: nothing (`read`), changes the requester's
own private data (`private_write`: memories), or has a persistent or external
effect others notice (`external`: schedules; anything later that sends,
deletes or spends). A tool declares it as its `effect` attribute; a tool that
does not is taken as `external`."""


class Taint:
    """Where untrusted text entered a run's context so far: "history" (other
    people's messages or tool output in the conversation), "memory" (recalled
    memories), "wakeup" (a scheduled prompt), "tool_result", "others" (another
    person's message joined the run). Empty: a direct request."""

    __slots__ = ("sources",)

    def __init__(self, *sources: str) -> None:
        self.sources: set[str] = set(sources)

    def add(self, source: str) -> None:
        self.sources.add(source)

    def __bool__(self) -> bool:
        return bool(self.sources)

    def __repr__(self) -> str:
        return f"Taint({', '.join(sorted(self.sources))})"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the run that called it."""

    user_id: int
    role: Role
    conversation_id: int
    conversation_key: str
    platform: str
    run_id: str
    chat_type: ChatType = "direct"
    untrusted: Taint = field(default_factory=Taint)
    """Grows during the run; consequential tools are held for confirmation
    while it is not empty (`bot.tools.actions`)."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result with more than text: images the model sees after the
    text (an MCP tool's; the text names each image, since the stored history
    keeps only the text), and a line for the call's span in the run's trace
    (what was fetched and how much, say). The model sees `text`."""

    text: str
    images: tuple[ImageBlock, ...] = ()
    trace: str | None = None

    def __str__(self) -> str:
        return self.text


@runtime_checkable
class Tool(Protocol):
    """A capability offered to the LLM. `run` returns text for the model (or a
    `ToolOutput` with images or a line for the trace), or raises (any exception
    is reported through the error channel)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    min_role: Role
    module: str
    # Optional attributes (read with `bot.tools.actions.effect_of` and friends):
    # effect: Effect = "external"; trusted_output: bool = False (True when the
    # result is text we generate, not content from elsewhere); and
    # describe(args) -> str, one line for the confirmation prompt;
    # timeout_seconds: float, when the tool bounds its own calls (an MCP
    # server's `timeout_seconds`); personas: the personas it is offered in;
    # searchable: True when it may be offered through `tool_search` instead of
    # inline (`bot.tools.search`).

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str | ToolOutput: ...


@dataclass(frozen=True, slots=True)
class CommandInfo:
    """What an adapter needs to register a slash command natively."""

    name: str
    description: str
    usage: str
    min_role: Role


@dataclass(frozen=True, slots=True)
class ChannelMark:
    """A channel with recent traffic, and the newest message of it the core has."""

    channel_id: str
    server_id: str | None
    last_message_id: str


class Leadership(Protocol):
    """One holder across every instance sharing the database (e.g. the one
    Telegram long poller): `wait()` returns once this instance holds it, `lost()`
    once it no longer does."""

    @property
    def held(self) -> bool: ...

    async def wait(self) -> None: ...

    async def lost(self) -> None: ...


class Core(Protocol):
    """What adapters see of the service: a sink for messages and the command list.

    `handle(msg, deliver=False)` returns the replies instead of sending them,
    for platforms that answer through their own channel (slash commands,
    interactions); such an adapter reports what it then fails to deliver with
    `record_delivery_failure`."""

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        """`on_accepted` is called as soon as the message is durably taken (its dedupe
        key claimed), before the agent runs: an adapter that acknowledges deliveries
        (a polling offset, a webhook's answer) can do it then, knowing a redelivery
        will be recognised. Ignored, context-only and duplicate messages return
        without it."""
        ...

    def command_infos(self) -> Sequence[CommandInfo]: ...

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        """Record a reply the adapter could not deliver itself (e.g. an interaction
        follow-up after `handle(deliver=False)`), so it is not lost silently."""
        ...

    def leadership(self, name: str) -> Leadership:
        """The election for `name` (one per bot and transport, e.g.
        "telegram-polling:<bot id>"): only its holder may poll or connect."""
        ...

    async def recent_channels(
        self, platform: str, within: timedelta, limit: int
    ) -> Sequence[ChannelMark]:
        """The channels of `platform` with messages stored within `within`, most
        recently active first, each with the newest message id stored: where an
        adapter whose platform does not redeliver looks for what it missed."""
        ...


class SendProgress(Protocol):
    """Where one reply's delivery stands (kept in the outbox). An adapter sends
    only the parts after the `done` ones, and reports each part as soon as the
    platform took it, so a reply taken over after a crash never repeats a part."""

    @property
    def done(self) -> Sequence[str]:
        """Platform ids of the parts already delivered, in order."""
        ...

    def nonce(self, index: int) -> str:
        """A stable idempotency key for part `index` (Discord's `nonce`)."""
        ...

    @property
    def resumed(self) -> bool:
        """Taken over from a sender that died: the part after the `done` ones may
        have reached the platform without being recorded. An adapter that can
        look (the channel's history) checks before posting it again."""
        ...

    @property
    def since(self) -> datetime:
        """When the reply was stored: no part of it is older."""
        ...

    async def sent(self, index: int, platform_id: str, *, last: bool = False) -> None:
        """Part `index` reached the platform as `platform_id`. `last`: it was the
        reply's final part (its end is recorded next, so it may not need a
        record of its own)."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """One chat platform. `send` renders canonical Markdown for the platform,
    splits it to the platform's limits and raises `DeliveryFailed` when a part
    finally cannot be delivered; it returns the platform ids of what was sent.
    With `progress` it skips the parts already delivered and reports each new
    one as it goes."""

    platform: str

    async def start(self, core: Core) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: SendProgress | None = None) -> list[str]: ...

    async def show_typing(self, target: Target) -> None: ...


@runtime_checkable
class Ready(Protocol):
    """Optional for an `Adapter` (`GET /readyz`): whether it is connected to its
    platform now (polling works or the webhook is set, the socket or gateway is
    up). An adapter without it counts as ready once started."""

    async def ready(self) -> bool: ...


async def is_ready(adapter: object) -> bool:
    """`adapter.ready()` when it has one, else True; a failing check is False."""
    check = getattr(adapter, "ready", None)
    if check is None:
        return True
    try:
        return bool(await check())
    except Exception as exc:
        log.warning("adapter.ready_failed: %s", type(exc).__name__)
        return False


async def hand_over(
    core: Core,
    msg: IncomingMessage,
    tasks: set[asyncio.Task[Any]],
    *,
    deliver: bool = True,
) -> bool:
    """The adapter's side of intake. Gives `msg` to the core in a background task
    (added to `tasks`) and returns as soon as the core has stored it — the moment
    to acknowledge the platform — or decided it needs no storing (ignored,
    duplicate): True. False when the core could not take it (database down,
    shutting down): do not acknowledge, so the platform delivers it again. The
    run itself goes on in the background."""
    accepted = asyncio.Event()

    async def process() -> bool:
        try:
            await core.handle(msg, deliver=deliver, on_accepted=accepted.set)
        except Exception as exc:
            log.warning(
                "intake.not_taken platform=%s event=%s: %s: %s",
                msg.platform,
                msg.dedupe_key,
                type(exc).__name__,
                exc,
            )
            return False
        return True

    task = asyncio.create_task(process(), name=f"{msg.platform}:{msg.dedupe_key}")
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    waiter = asyncio.create_task(accepted.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return accepted.is_set() or (task.done() and not task.cancelled() and task.result())


@runtime_checkable
class FileFetcher(Protocol):
    """An adapter that downloads a message's files after intake, so the platform
    is acknowledged at once. The pipeline calls it before the run, also when it
    runs a message taken over after a crash (the inbox keeps no file it did not
    have)."""

    platform: str

    async def fetch_files(self, msg: IncomingMessage) -> IncomingMessage: ...


@runtime_checkable
class Interactive(Protocol):
    """An adapter that drives the process itself (the terminal chat): `run`
    returns when the user is done."""

    platform: str
    failed_replies: int
    """Replies so far that reported a failure (`Reply.kind == "error"`)."""

    async def run(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Progress:
    """A run still going, as a live view may show it: the reply's text so far
    (already filtered: safe to show) and what the agent is doing."""

    run_id: str
    text: str = ""
    activity: str | None = None
    """"thinking", "using <tool>", …; None once text flows."""
    ended: bool = False
    """The run is over (its final reply, if any, comes through `send`). The
    `text` of its end is what it leaves on the screen for good: a stopped
    run's text so far, marked as stopped (empty: nothing)."""


@runtime_checkable
class LiveView(Protocol):
    """An adapter that shows runs while they go (the terminal on a TTY)."""

    @property
    def live(self) -> bool:
        """Whether it wants `show` calls at all."""
        ...

    def conversation_keys(self) -> Sequence[str]:
        """The conversations it shows."""
        ...

    def show(self, progress: Progress) -> None: ...

    def above(self, stream: TextIO) -> TextIO | None:
        """Where text meant for `stream` goes while the view is up, when
        `stream` writes to the view's own terminal (log lines on stderr): a
        stream printing above the view, never over it. None: `stream` is
        elsewhere (a file, a pipe); write to it as it is."""
        ...


class LiveMessage(Protocol):
    """A reply shown while the model writes it, on one platform (see `Streaming`).

    The core calls `update` at most once per `[streaming] interval_seconds`,
    one call at a time, always with the whole text so far; then `close` once;
    then either sends the final reply with `Reply.drafts = drafts()` (the
    adapter's `send` edits those messages into the reply's parts) or, when the
    run ended with nothing to show, calls `discard`."""

    async def update(self, text: str) -> None:
        """Show `text`: canonical Markdown of the reply so far, already safe to
        show (filtered by `bot.agent.streaming`), possibly ending with an
        activity line such as "_searching memory…_". Render and split it as
        `send` would; past the platform's length limit continue in a new
        message. Raise `bot.errors.RateLimited` when the platform asks to slow
        down (updates pause for `retry_after`, the final reply still goes out);
        any other exception ends the live view for this run."""
        ...

    def drafts(self) -> tuple[str, ...]:
        """Platform ids of the messages posted for this reply so far, in order
        (empty when the platform shows a draft that is not a message, e.g.
        Telegram's `sendMessageDraft`)."""
        ...

    async def close(self) -> None:
        """No more updates (e.g. Slack `chat.stopStream`). Must not raise."""
        ...

    async def discard(self) -> None:
        """The run ended with nothing to show (`NO_REPLY`): remove what was
        posted. Must not raise."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """An adapter that shows replies while they are written: posted messages
    it then edits, a platform draft, or native streaming."""

    platform: str

    def open_stream(self, target: Target) -> LiveMessage | None:
        """A live view for a reply to `target`, or None where this target
        cannot stream (the reply then comes whole through `send`). Must not do
        I/O: the first `update` posts."""
        ...


RouteHandler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


@dataclass(frozen=True, slots=True)
class Route:
    """An HTTP endpoint an adapter serves on the service's web server
    (`[server] host`/`port`), e.g. `POST /telegram/webhook`."""

    method: str
    path: str
    handler: RouteHandler


@runtime_checkable
class WebHooks(Protocol):
    """An adapter that receives platform events over HTTP. `routes()` is called
    after `create_adapter` and before `start`."""

    platform: str

    def routes(self) -> Sequence[Route]: ...
