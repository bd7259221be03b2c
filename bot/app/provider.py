"""A model provider whose SDK loads in the background.

Importing the provider's SDK is most of a start's time (`import anthropic`
alone: ~1.6 s on this project's 2-core machine). A service waits for it
before it serves (`App.open`); the terminal chat need not: it shows its prompt
at once and the SDK loads while the person types (`App(provider_in_background
=True)`). The first model call waits for what is left of the loading; later
calls go straight to the provider.

The loading is `bot.app.service.import_provider` (a worker thread, so the
event loop never stalls on it), begun by `start()` or by the first call,
whichever comes first. It is CPU work that holds the interpreter's lock most
of the time, so begun alongside the rest of a start it would slow that down
as much as it overlapped it: `switchboard chat` begins it once it is ready
for input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bot.llm.capabilities import Feature, supports
from bot.llm.types import LLMRequest, LLMResponse, TextCallback
from bot.ports import Provider

Capabilities = Callable[[str, Feature], bool]


def takes_everything(model: str, feature: Feature) -> bool:
    """What the built-in provider (Anthropic's current models) takes: images,
    PDF documents and tools."""
    return True


class BackgroundProvider:
    def __init__(
        self,
        build: Callable[[], Provider],
        load: Callable[[], Awaitable[None]],
        capabilities: Capabilities = takes_everything,
    ) -> None:
        """`load` imports what `build` needs (in a worker thread); `build`
        then makes the provider, quickly. `capabilities` answers `supports`
        until it is built (a run asks before its first call)."""
        self._build = build
        self._capabilities = capabilities
        self._load = load
        self._loading: asyncio.Task[None] | None = None
        self._provider: Provider | None = None

    def start(self) -> None:
        """Begin loading now (once; needs a running event loop)."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())

    @property
    def loaded(self) -> bool:
        return self._provider is not None

    async def ready(self) -> Provider:
        """The provider, once its SDK is loaded (a failed loading raises here,
        at each call, rather than leaving every call waiting)."""
        if self._provider is None:
            self.start()
            assert self._loading is not None
            await asyncio.shield(self._loading)  # one caller giving up stops no other
            if self._provider is None:
                self._provider = self._build()
        return self._provider

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        provider = await self.ready()
        return await provider.complete(request, on_text)

    def supports(self, model: str, feature: Feature) -> bool:
        if self._provider is not None:
            return supports(self._provider, model, feature)
        return self._capabilities(model, feature)

    async def aclose(self) -> None:
        loading, self._loading = self._loading, None
        if loading is not None and not loading.done():
            loading.cancel()  # its thread finishes on its own; nothing waits for it here
            await asyncio.wait({loading})
        if self._provider is not None:
            await self._provider.aclose()
