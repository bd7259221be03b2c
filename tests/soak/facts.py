"""What the soak saw, as plain rows: what was sent and accepted (the senders),
what each platform shows at the end (the fakes), what the model was asked
(the fake model) and what the database holds. `tests.soak.collect` gathers
them; `tests.soak.checks` judges them (and its tests craft them by hand).

Times are seconds since the epoch (`time.time()`); a user is named
``"<platform>:<platform user id>"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.soak.model import ModelCall

REFUSAL_MARKERS = ("the allowance resets on", "tokens one run may use")
"""Text of the service's budget refusals (bot/accounts/holds.py `refusal_text`,
`run_cap_text`)."""


@dataclass(frozen=True, slots=True)
class Message:
    """A message the harness sent."""

    token: str
    conversation: str
    user: str
    order: int
    """Its place among its conversation's messages, as sent."""
    accepted: bool
    """The platform had it acknowledged (Slack: 200; Telegram: the webhook's
    2xx; Discord: dispatched on the gateway)."""
    kind: str = "plain"
    platform_id: str | None = None
    """Slack ts, Telegram update id, Discord message id (for reading the logs)."""


@dataclass(frozen=True, slots=True)
class BotMessage:
    """One message of the bot's as the platform shows it at the end (its final
    text after edits; deleted ones are not shown)."""

    conversation: str
    seq: int
    """Creation order on the platform (Slack ts, Telegram message id, Discord id)."""
    text: str


@dataclass(frozen=True, slots=True)
class InboxRow:
    token: str | None
    """The token in the message's stored text."""
    user: str
    state: str
    error: str | None = None
    run_id: str | None = None
    finished_at: float | None = None
    listed: bool = False
    """Shown by `switchboard admin inbox` (failed rows, with their error)."""
    event_id: str | None = None
    """The row's platform event id (for reading the logs)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    status: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Charge:
    """A token log: one LLM call's tokens, charged to a user."""

    user_id: int
    at: float
    tokens: int
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Account:
    user_id: int
    user: str
    used: int
    overage: int
    allowance: int | None
    """allowance + granted for the period (None: unlimited)."""


@dataclass(frozen=True, slots=True)
class Wakeup:
    token: str
    """``w:…``, in the job's prompt."""
    due_at: float | None
    state: str
    run_count: int = 0


@dataclass(frozen=True, slots=True)
class LogLine:
    instance: str
    level: str
    event: str
    run_id: str | None = None
    text: str = ""


@dataclass
class Facts:
    messages: list[Message] = field(default_factory=list)
    bot_messages: list[BotMessage] = field(default_factory=list)
    inbox: list[InboxRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    charges: list[Charge] = field(default_factory=list)
    accounts: list[Account] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    wakeups: list[Wakeup] = field(default_factory=list)
    logs: list[LogLine] = field(default_factory=list)
    outbox_pending: int = 0
    outbox_failed: list[tuple[str | None, str]] = field(default_factory=list)
    """(run id, error) of replies that could not be delivered (state failed)."""
    delivery_failures: list[str] = field(default_factory=list)
    """Conversation keys of `delivery_failures` rows."""
    jobs_running: int = 0
    checked_at: float = 0.0
