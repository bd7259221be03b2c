"""The services one message's path uses, built by `bot.app`."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.accounts.budgets import Budgets
from bot.accounts.identity import Identity
from bot.agent.events import EventBus
from bot.agent.guard import Guard
from bot.agent.loop import AgentLoop
from bot.commands.registry import Commands
from bot.config import Settings
from bot.conversations import Conversations
from bot.media import Media
from bot.metrics import Metrics
from bot.personas import PersonaBook
from bot.pipeline.compactor import Compactor
from bot.pipeline.control import RunControl
from bot.pipeline.intake import Inbox
from bot.pipeline.outbox import Outbox
from bot.pipeline.persist import TurnWriter
from bot.store import Store
from bot.store.coordination import Coordination
from bot.store.leases import Leases
from bot.store.memories import MemoryStore
from bot.tools.actions import PendingActions
from bot.tools.registry import ToolRegistry
from bot.tools.skill_tools import SkillBook


@dataclass(frozen=True, slots=True)
class Services:
    """Everything the pipeline needs, built by `bot.app`."""

    settings: Settings
    store: Store
    identity: Identity
    budgets: Budgets
    personas: PersonaBook
    conversations: Conversations
    commands: Commands
    tools: ToolRegistry
    agent: AgentLoop
    inbox: Inbox
    outbox: Outbox
    writer: TurnWriter
    leases: Leases
    coordination: Coordination
    control: RunControl
    bus: EventBus
    guard: Guard
    memories: MemoryStore
    compactor: Compactor
    actions: PendingActions | None = None
    """Consequential tool calls held for confirmation (None: nothing is held)."""
    metrics: Metrics = field(default_factory=Metrics)
    """What `GET /metrics` reports (`bot.metrics`)."""
    skills: SkillBook = field(default_factory=lambda: SkillBook(()))
    """The installed skills (`[skills]`), each persona's kit."""
    media: Media | None = None
    """What a message's files become for the model (None: `[media]` without
    transcription, long documents cut rather than kept)."""
