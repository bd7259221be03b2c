"""What people are told when the model could not answer: the one place that
words provider failures, for every platform and every provider.

A failure says what to do about it. A rejected key names the environment
variable that holds it (trying again will not help); an address that cannot be
reached names the URL tried and the setting that sets it; a model the service
does not have names the model and where it is configured; a rate limit or an
overloaded service is where "try again" is right. The text names settings and
variables, never their values: no key, no password in a URL.

Providers raise `bot.errors.ProviderError` subclasses carrying `endpoint` (the
URL and the names of the settings behind it), `model` and `status`; `explain`
turns one into the reply. When a whole fallback chain failed (`tried`), the
reply says so.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

from bot.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderEndpoint,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    ProviderUnreachable,
)

SORRY = "Sorry, I can't answer"
OPERATOR = "Whoever runs this bot should"
TRY_AGAIN = "Please try again in a moment."
UNKNOWN_ENDPOINT = ProviderEndpoint(
    url="the AI service's address", url_setting="llm.base_url", key_env="ANTHROPIC_API_KEY"
)
"""What a failure names when its provider did not say (raised before a call)."""


def explain(exc: ProviderError, model_origin: str | None = None) -> str:
    """The reply for a run that failed with `exc`. `model_origin` says where the
    run's model is configured (`[llm] model`, a persona's file, ...)."""
    where = exc.endpoint or UNKNOWN_ENDPOINT
    if exc.tried:  # a fallback chain (`bot.llm.router`), all of it failed
        return (
            "Sorry, none of the configured models could answer just now (each was "
            f"overloaded, failing or out of reach). {TRY_AGAIN}"
        )
    if isinstance(exc, ProviderAuthError):
        variable = f"the environment variable {where.key_env}"
        return f"{SORRY}: {_refusal(exc.status)}. {OPERATOR} check {variable}."
    if isinstance(exc, ProviderUnreachable):
        return (
            f"{SORRY}: I could not connect to the AI service at {where.url}. {OPERATOR} "
            f"check that it is running there, or set {where.url_setting} to where it runs."
        )
    if isinstance(exc, ModelNotFound):
        model = f'"{exc.model}"' if exc.model else "the model asked for"
        origin = model_origin or "[llm] model or the persona's model"
        return (
            f"{SORRY}: the AI service has no model called {model} (or this key may not "
            f"use it). It is set in {origin}: whoever runs this bot should change it to "
            "a model the service offers."
        )
    if isinstance(exc, ProviderRateLimited):
        busy = "is limiting how often we may ask"
    elif isinstance(exc, Overloaded):
        busy = "is overloaded"
    else:
        return _other(exc, where)
    return f"Sorry, the AI service {busy} just now. {_wait(exc.retry_after)}"


def _other(exc: ProviderError, where: ProviderEndpoint) -> str:
    status = f" ({exc.status})" if exc.status else ""
    if isinstance(exc, ContextWindowExceeded):
        return (
            "Sorry, this conversation has grown too long for the model. "
            "Send /new to start a fresh one."
        )
    if isinstance(exc, ProviderBadRequest) and exc.status == 404:
        return (
            f"{SORRY}: there is no AI service API at {where.url} (it answered 404). "
            f"{OPERATOR} check {where.url_setting}."
        )
    if isinstance(exc, ProviderBadRequest):
        return f"{SORRY}: the AI service refused the request{status}. The error has been logged."
    if isinstance(exc, ProviderUnavailable):
        return f"Sorry, the AI service failed to answer just now{status}. {TRY_AGAIN}"
    return f"Sorry, I couldn't get an answer from the AI service just now{status}. {TRY_AGAIN}"


def public_url(url: str) -> str:
    """`url` fit to show: without a user, password, query or fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an address that is not a valid URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _refusal(status: int | None) -> str:
    if status == 402:
        return "the AI service refused the API key: its account has a billing problem"
    if status == 403:
        return "the AI service does not let the API key do this (403)"
    if status is None:
        return "there is no usable API key for the AI service"
    return f"the AI service rejected the API key ({status})"


def _wait(seconds: float | None) -> str:
    if seconds is None or seconds <= 5:
        return TRY_AGAIN
    if seconds < 90:
        return f"Please try again in about {math.ceil(seconds)} seconds."
    return f"Please try again in about {math.ceil(seconds / 60)} minutes."
