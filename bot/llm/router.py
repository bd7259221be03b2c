"""Which provider answers a model, and what happens when it fails.

`ModelRouter` is the service's one `Provider`: a request's `model` is a
configured name ("openrouter/x", or a bare name: the built-in provider), and
the router hands the request to that provider with the model name its API
takes. When the provider fails in a way that passes (overloaded, 5xx, a
timeout, no connection, rate limited on every key of its pool), after the
SDK's own retries, the same request goes to the next model of
`request.fallback`, within the same call; a bad request (any other 4xx) never
goes further (retrying it elsewhere only spends more). Every call starts at
the head of its chain: no model is skipped for having failed before.

Each fallback is an INFO line, `on_fallback` (the service's metric) and the
request's own `on_fallback` (the run's span; its live view drops the text
streamed so far). When the whole chain fails, the last error is raised with
the models tried (`ProviderError.tried`).

`KeyPool` is one provider with several keys: a call rate limited on one key
is tried on the next at once, and the pool keeps using that one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bot.config import BUILTIN_PROVIDER, split_model
from bot.errors import (
    Overloaded,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from bot.llm.capabilities import Feature, fitted, supports
from bot.llm.gate import Provider
from bot.llm.types import (
    Block,
    ChatMessage,
    Fallback,
    LLMRequest,
    LLMResponse,
    TextBlock,
    TextCallback,
    ToolResultBlock,
    ToolUseBlock,
)

log = logging.getLogger("switchboard.llm")

Observer = Callable[[str, str, str], None]
"""(from model, to model, reason) of each fallback: the metric."""


def fallback_reason(exc: ProviderError) -> str | None:
    """Why a failure sends the call to the next model, or None when it must not."""
    if isinstance(exc, Overloaded):
        return "overloaded"
    if isinstance(exc, ProviderRateLimited):
        return "rate_limited"
    if isinstance(exc, ProviderUnavailable):
        return "timeout" if "timed out" in str(exc) else "unavailable"
    return None


@dataclass
class Route:
    """One configured provider: built on its first call (`module` imported
    off the event loop first: the SDK takes seconds to import)."""

    name: str
    build: Callable[[], Provider]
    module: str | None = None
    features: Mapping[str, bool] = field(default_factory=dict)
    """What its models take (config's `supports`, else its kind's defaults)."""
    provider: Provider | None = None
    _building: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def ready(self) -> Provider:
        if self.provider is None:
            async with self._building:
                if self.provider is None:
                    if self.module is not None:
                        await asyncio.to_thread(importlib.import_module, self.module)
                    self.provider = self.build()
        return self.provider


class ModelRouter:
    def __init__(self, routes: Sequence[Route], on_fallback: Observer | None = None) -> None:
        self.routes = {route.name: route for route in routes}
        self._observe = on_fallback

    def route(self, model: str) -> tuple[Route, str]:
        """The provider of a configured model name, and the name its API takes."""
        name, api_model = split_model(model)
        route = self.routes.get(name)
        if route is None:
            raise ProviderBadRequest(
                f"model {model!r} names the provider {name!r}, which is not configured "
                f"(add [llm.providers.{name}])"
            )
        return route, api_model

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        chain = list(dict.fromkeys((request.model, *request.fallback)))
        for index, model in enumerate(chain):
            started, clock = time.time(), time.monotonic()
            try:
                return await self._ask(model, request, on_text)
            except ProviderError as exc:
                exc.model = model  # as config names it (the wording of failures)
                reason = fallback_reason(exc)
                if reason is None or index == len(chain) - 1:
                    if index:
                        exc.tried = tuple(chain[: index + 1])
                    raise
                following = chain[index + 1]
                log.info("llm.fallback from=%s to=%s reason=%s: %s", model, following, reason, exc)
                if self._observe is not None:
                    self._observe(model, following, reason)
                if request.on_fallback is not None:
                    ms = int((time.monotonic() - clock) * 1000)
                    await request.on_fallback(
                        Fallback(model, following, reason, str(exc)[:500], started, ms)
                    )
        raise AssertionError("unreachable: a chain has at least one model")

    async def _ask(
        self, model: str, request: LLMRequest, on_text: TextCallback | None
    ) -> LLMResponse:
        route, api_model = self.route(model)
        provider = await route.ready()
        messages = fitted(request.messages, self, model)
        tools = request.tools
        if tools and not self.supports(model, "tools"):
            tools, messages = (), tuple(_without_tools(m) for m in messages)
        asked = dataclasses.replace(
            request,
            model=api_model,
            messages=messages,
            tools=tools,
            fallback=(),
            on_fallback=None,
            cached_tools=request.cached_tools if tools else None,
        )
        response = await provider.complete(asked, on_text)
        if route.name == BUILTIN_PROVIDER:
            return response  # bare names, as the API reports them (dated snapshots)
        return dataclasses.replace(response, model=f"{route.name}/{api_model}")

    def supports(self, model: str, feature: Feature) -> bool:
        try:
            route, _ = self.route(model)
        except ProviderBadRequest:
            return False
        return route.features.get(feature, True)

    async def aclose(self) -> None:
        for route in self.routes.values():
            if route.provider is not None:
                await route.provider.aclose()


def _without_tools(message: ChatMessage) -> ChatMessage:
    """A message for a model that takes no tools: its tool calls and results as text."""
    if not any(isinstance(b, ToolUseBlock | ToolResultBlock) for b in message.content):
        return message
    blocks: list[Block] = []
    for block in message.content:
        if isinstance(block, ToolUseBlock):
            blocks.append(TextBlock(f"[called the tool {block.name}]"))
        elif isinstance(block, ToolResultBlock):
            blocks.append(TextBlock(f"[tool result]\n{block.content}"))
        else:
            blocks.append(block)
    return ChatMessage(message.role, tuple(blocks))


class KeyPool:
    """One provider's clients, one per key: a call rate limited on a key goes
    to the next key at once, and the pool keeps the key that answered."""

    def __init__(self, label: str, clients: Sequence[Provider], envs: Sequence[str]) -> None:
        self.label = label
        self.clients = list(clients)
        self.envs = list(envs)
        """The keys' environment variables (what a log line may name)."""
        self.current = 0

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        tried = 0
        while True:
            index = self.current
            try:
                return await self.clients[index].complete(request, on_text)
            except ProviderRateLimited:
                tried += 1
                if tried >= len(self.clients):
                    raise
                if self.current == index:  # another call may have moved on already
                    self.current = (index + 1) % len(self.clients)
                log.info(
                    "llm.key_rotated provider=%s from=%s to=%s (rate limited)",
                    self.label,
                    self.envs[index],
                    self.envs[self.current],
                )

    def supports(self, model: str, feature: Feature) -> bool:
        return supports(self.clients[0], model, feature)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
