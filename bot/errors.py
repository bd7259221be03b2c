"""The exception tree. Everything we raise on purpose is a `BotError`."""

from __future__ import annotations

from dataclasses import dataclass


class BotError(Exception):
    """Base of every error Switchboard raises on purpose."""


class ConfigError(BotError):
    """Bad configuration: a file, a key, a value or a missing secret."""


class StartupError(BotError):
    """The service cannot start (database unreachable, schema missing, a platform
    rejected the bot token, ...).

    `str()` is one line an operator can act on: what is wrong, then (when known)
    what to do about it, e.g. "cannot reach the database at db:5432 (connection
    refused). Check [database] url and that the server is running". Neither part
    may contain a secret.
    """

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint

    def __str__(self) -> str:
        if not self.hint:
            return self.problem
        return f"{self.problem.rstrip('.')}. {self.hint}"


class ShuttingDown(BotError):
    """The service is stopping and takes no new messages (the platform keeps
    them for the next process)."""


class BudgetExceeded(BotError):
    """The user's token allowance for this period is spent."""


class AdapterError(BotError):
    """A platform refused or failed an operation."""


class RateLimited(AdapterError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeliveryFailed(AdapterError):
    """A reply could not be delivered after retries."""


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """Where a provider's calls go and which settings say so: what the wording
    of its failures names (`bot.llm.failures`). Names only, never a secret."""

    url: str
    """The base URL the calls go to (no credentials, no query)."""
    url_setting: str
    """The setting that sets `url`: "llm.base_url"."""
    key_env: str
    """The environment variable that holds the key: "ANTHROPIC_API_KEY"."""


class ProviderError(BotError):
    """The LLM provider failed. Never turned into a normal reply.

    The provider sets `endpoint` and `model` (the model the call asked for) on
    what it raises, so that the wording for people can name them."""

    retryable: bool = False
    tried: tuple[str, ...] = ()
    """The models of the call's fallback chain that were asked, when more
    than one was (`bot.llm.router`): the whole chain failed."""
    endpoint: ProviderEndpoint | None = None
    model: str | None = None
    status: int | None = None
    """The HTTP status the API answered with, when it answered."""


class ProviderRateLimited(ProviderError):
    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(ProviderError):
    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    """Connection failure, timeout, a cut stream or a server error."""

    retryable = True


class ProviderUnreachable(ProviderUnavailable):
    """No connection could be made to the API's URL."""


class ProviderAuthError(ProviderError):
    """The API key is missing, wrong or not allowed to do this."""


class ProviderBadRequest(ProviderError):
    """The request was rejected as invalid."""


class ContextWindowExceeded(ProviderBadRequest):
    """The prompt does not fit the model's context window."""


class ModelNotFound(ProviderBadRequest):
    """The API has no model of the name asked for (or the key may not use it)."""


class ToolFailed(BotError):
    """A tool could not do its job. The message is shown to the LLM."""


class ToolReportedError(ToolFailed):
    """The tool's own output said it failed (an MCP result flagged `isError`):
    the message is text from elsewhere, so it reaches the LLM as data, like the
    output of a tool whose output is not trusted."""


class CommandError(BotError):
    """A slash command was used wrongly; the message is shown to the user."""


class CommandDenied(CommandError):
    """The user's role does not allow this use of a command. Audited as denied."""
