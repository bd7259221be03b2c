"""A `Provider` that counts every call for `GET /metrics`: requests by model
and outcome, tokens by kind and the estimated cost (`bot.llm.pricing`), and
the web searches the provider ran within a call.

Wrapping the provider once (in `bot.app`) counts every LLM call the service
makes — runs, summaries, memory flushes — without touching their code.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

from bot.config import Price
from bot.errors import ProviderError
from bot.llm.capabilities import Feature, supports
from bot.llm.pricing import estimate_cost
from bot.llm.types import LLMRequest, LLMResponse, ServerToolResultBlock, TextCallback
from bot.metrics import Metrics
from bot.ports import Provider


class CountedProvider:
    def __init__(self, inner: Provider, metrics: Metrics, prices: Mapping[str, Price]) -> None:
        self.inner = inner
        self._metrics = metrics
        self._prices = prices

    async def complete(
        self, request: LLMRequest, on_text: TextCallback | None = None
    ) -> LLMResponse:
        try:
            response = await self.inner.complete(request, on_text)
        except asyncio.CancelledError:
            self._metrics.llm_call(request.model, "cancelled", None)
            raise
        except Exception as exc:
            self._metrics.llm_call(request.model, error_kind(exc), None)
            raise
        cost = estimate_cost(response.model or request.model, response.usage, self._prices)
        self._metrics.llm_call(request.model, "ok", response.usage, cost)
        for block in response.content:  # searches the provider ran within the call
            if isinstance(block, ServerToolResultBlock):
                self._metrics.web_request(block.name, "error" if block.error else "ok")
        return response

    def supports(self, model: str, feature: Feature) -> bool:
        return supports(self.inner, model, feature)

    async def aclose(self) -> None:
        await self.inner.aclose()


def error_kind(exc: BaseException) -> str:
    """A provider error's class as a label ("overloaded", "provider_rate_limited",
    …); anything else is "error"."""
    if not isinstance(exc, ProviderError):
        return "error"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()
