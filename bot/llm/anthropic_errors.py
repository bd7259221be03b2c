"""The Anthropic SDK's failures as our errors (`bot.errors`): built only from
the status code, the API's error type and its own message, so the key never
leaks. An ``error`` event inside a stream is raised by the SDK as a plain
`APIStatusError` carrying the stream's HTTP status (200), so errors are
classified by the API error type as well as by status code."""

from __future__ import annotations

import re
from collections.abc import Mapping

import anthropic

from bot.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    ProviderUnreachable,
)
from bot.llm.retry_after import retry_after

_CONTEXT_TOO_LONG = re.compile(
    r"prompt is too long|context (window|limit|length)|too many (input )?tokens",
    re.IGNORECASE,
)


def map_error(exc: anthropic.APIError) -> ProviderError:
    """Translate an SDK error into our tree. Messages hold no request data."""
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderUnavailable("Anthropic API request timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderUnreachable("could not connect to the Anthropic API")
    if not isinstance(exc, anthropic.APIStatusError):
        return ProviderError(f"unexpected response from the Anthropic API ({type(exc).__name__})")

    # An `error` event inside a 200 stream keeps the stream's status: trust the type.
    status = exc.status_code if exc.status_code >= 400 else None
    etype = str(exc.type) if exc.type else None
    api_message = exc.api_message or ""
    msg = f"Anthropic API error {status or 'in stream'} {etype or 'unknown_error'}"
    if api_message:
        msg += f": {api_message}"
    if exc.request_id:
        msg += f" (request_id={exc.request_id})"

    error = _classify(status, etype, api_message, msg, exc.response.headers)
    error.status = status
    return error


def _classify(
    status: int | None, etype: str | None, api_message: str, msg: str, headers: Mapping[str, str]
) -> ProviderError:
    if status == 429 or etype == "rate_limit_error":
        return ProviderRateLimited(msg, retry_after(headers))
    if status == 529 or etype == "overloaded_error":
        return Overloaded(msg, retry_after(headers))
    if status in (401, 402, 403) or etype in (
        "authentication_error",
        "permission_error",
        "billing_error",
    ):
        return ProviderAuthError(msg)
    if status == 400 or etype == "invalid_request_error":
        if _CONTEXT_TOO_LONG.search(api_message):
            return ContextWindowExceeded(msg)
        return ProviderBadRequest(msg)
    if etype == "not_found_error" and "model" in api_message.lower():
        return ModelNotFound(msg)  # the API's words: "model: claude-…"
    if status in (404, 413, 422) or etype in ("not_found_error", "request_too_large"):
        return ProviderBadRequest(msg)
    if status in (408, 504) or (status or 0) >= 500 or etype in ("api_error", "timeout_error"):
        return ProviderUnavailable(msg)
    return ProviderError(msg)
