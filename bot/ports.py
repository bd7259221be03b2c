"""Protocols at the edges of the core: LLM providers, tools and adapters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from bot.llm.types import LLMRequest, LLMResponse

if TYPE_CHECKING:
    from aiohttp import web
from bot.types import ChatType, IncomingMessage, Outcome, Reply, Role, Target

TextCallback = Callable[[str], Awaitable[None]]


class Provider(Protocol):
    """An LLM backend. Raises `bot.errors.ProviderError` subclasses on failure."""

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse: ...

    async def aclose(self) -> None: ...


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


@runtime_checkable
class Tool(Protocol):
    """A capability offered to the LLM. `run` returns text for the model, or
    raises (any exception is reported through the error channel)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    min_role: Role
    module: str

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str: ...


@dataclass(frozen=True, slots=True)
class CommandInfo:
    """What an adapter needs to register a slash command natively."""

    name: str
    description: str
    usage: str
    min_role: Role


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


@runtime_checkable
class Adapter(Protocol):
    """One chat platform. `send` renders canonical Markdown for the platform,
    splits it to the platform's limits and raises `DeliveryFailed` when a part
    finally cannot be delivered; it returns the platform ids of what was sent."""

    platform: str

    async def start(self, core: Core) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply) -> list[str]: ...

    async def show_typing(self, target: Target) -> None: ...


@runtime_checkable
class Interactive(Protocol):
    """An adapter that drives the process itself (the terminal chat): `run`
    returns when the user is done."""

    platform: str

    async def run(self) -> None: ...


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
