"""Wiring and lifecycle: store, provider, tools, pipeline, adapters.

`App.open()` prepares everything that does not talk to a chat platform
(database upgrade, persona sync, provider); `start_adapters()` loads the
adapters named in config lazily, so a platform library is only imported when
that platform is enabled.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import text

from bot.agent.compaction import Summarizer
from bot.agent.compactor import Compactor
from bot.agent.control import RunControl, stop_command
from bot.agent.errors import ErrorChannel
from bot.agent.events import EventBus
from bot.agent.executor import ToolExecutor
from bot.agent.flush import MemoryFlush
from bot.agent.guard import Guard
from bot.agent.loop import AgentLoop
from bot.audit import Audit
from bot.budget import Budgets
from bot.commands import Commands, CommandSpec, core_commands
from bot.config import Secrets, Settings
from bot.conversations import Conversations
from bot.dedupe import EventLog
from bot.errors import ConfigError, StartupError
from bot.identity import Identity
from bot.memory import MemoryStore
from bot.personas import sync_personas
from bot.pipeline import Pipeline, Services
from bot.ports import Adapter, Provider, Tool, WebHooks
from bot.scheduler import Scheduler
from bot.store import Store
from bot.tools.builtin import core_tools
from bot.tools.memory import memory_tools
from bot.tools.registry import ToolRegistry
from bot.tools.results import GetToolResult, ResultStore
from bot.types import utcnow
from bot.wakeups import Clock
from bot.web import WebServer
from bot.wiring import build_extras

log = logging.getLogger("switchboard.app")

EXTRAS = {"telegram": "telegram", "slack": "slack", "discord": "discord"}


def make_provider(settings: Settings, secrets: Secrets) -> Provider:
    from bot.llm.anthropic import AnthropicProvider

    return AnthropicProvider(
        api_key=secrets.require("anthropic_api_key"),
        base_url=settings.llm.base_url,
        max_retries=settings.llm.max_retries,
        timeout=settings.llm.timeout_seconds,
    )


@dataclass
class App:
    settings: Settings
    secrets: Secrets
    provider: Provider | None = None
    extra_tools: Sequence[Tool] = ()
    clock: Clock = utcnow
    """The scheduler's clock (tests pass a controllable one)."""
    store: Store = field(init=False)
    pipeline: Pipeline = field(init=False)
    scheduler: Scheduler = field(init=False)
    adapters: list[Adapter] = field(default_factory=list, init=False)
    web: WebServer | None = field(default=None, init=False)

    async def open(self) -> Pipeline:
        if self.provider is None:
            self.provider = make_provider(self.settings, self.secrets)
        self.store = Store(
            self.settings.database.url,
            echo=self.settings.database.echo,
            busy_timeout_ms=self.settings.database.busy_timeout_ms,
            schema=self.settings.database.schema_name,
        )
        await self.store.upgrade()
        personas = await sync_personas(self.store, self.settings.personas.dir)
        events = EventLog(self.store)
        for event in await events.unfinished():
            log.warning(
                "event.unfinished platform=%s event_id=%s since=%s "
                "(claimed but never answered: the process stopped mid-run)",
                event.platform,
                event.event_id,
                event.created_at,
            )
        errors = ErrorChannel(self.store)
        agent = self.settings.agent
        memories = MemoryStore(self.store)
        results = ResultStore(self.store, agent.tool_result_max_chars)
        memory = memory_tools(memories) if agent.memory else []
        budgets = Budgets(self.store, self.settings.budgets)
        conversations = Conversations(self.store)
        audit = Audit(self.store)
        identity = Identity(self.store, self.settings.admin.owners)
        extras = build_extras(
            self.settings, self.store, identity, budgets, conversations, personas, audit, self.clock
        )
        self.scheduler = extras.scheduler
        tools = ToolRegistry(
            [
                *core_tools(errors),
                GetToolResult(results),
                *memory,
                *extras.tools,
                *self.extra_tools,
            ]
        )
        commands = Commands([], audit)
        control = RunControl(agent.max_concurrent)
        spec_list: list[CommandSpec] = core_commands(conversations, commands.specs)
        spec_list.append(stop_command(control, conversations))
        for spec in [*spec_list, *extras.commands]:
            commands.add(spec)
        bus = EventBus()
        executor = ToolExecutor(
            errors, timeout=self.settings.llm.tool_timeout_seconds, results=results
        )
        summarizer = Summarizer(
            self.provider,
            self.settings.llm.fast_model,
            max_tokens=agent.summary_max_tokens,
            timeout=agent.summary_timeout_seconds,
        )
        flush = None
        if agent.memory and agent.memory_flush:
            flush = MemoryFlush(
                AgentLoop(self.provider, executor),  # internal: no events
                [t for t in memory if t.name != "memory_get"],
                messages=agent.memory_flush_messages,
                iterations=agent.memory_flush_iterations,
                timeout=agent.memory_flush_timeout_seconds,
            )
        self.pipeline = Pipeline(
            Services(
                settings=self.settings,
                store=self.store,
                identity=identity,
                budgets=budgets,
                personas=personas,
                conversations=conversations,
                commands=commands,
                tools=tools,
                agent=AgentLoop(self.provider, executor, summarizer=summarizer, bus=bus),
                events=events,
                control=control,
                bus=bus,
                guard=Guard(agent.guard_mode, agent.max_message_chars),
                memories=memories,
                compactor=Compactor(
                    self.store, conversations, summarizer, flush, budgets, self.settings
                ),
            )
        )
        return self.pipeline

    async def start_scheduler(self, platforms: Sequence[str] | None = None) -> None:
        """Start scheduled wakeups for `platforms` (default: the attached adapters')."""
        if not self.settings.scheduler.enabled:
            return
        served = [a.platform for a in self.adapters] if platforms is None else platforms
        await self.scheduler.start(self.pipeline, served)

    async def start_adapters(self, platforms: Sequence[str]) -> None:
        """Create the adapters named in config and start them."""
        await self.start([load_adapter(name, self.settings, self.secrets) for name in platforms])

    async def start(self, created: Sequence[Adapter]) -> None:
        """Serve the adapters' HTTP routes (and /healthz), then start them."""
        server = self.settings.server
        self.web = WebServer(server.host, server.port, self._health)
        for adapter in created:
            if isinstance(adapter, WebHooks):
                self.web.add_routes(adapter.routes())
        await self.web.start()
        for adapter in created:
            self.pipeline.attach(adapter)
            await adapter.start(self.pipeline)
            self.adapters.append(adapter)
            log.info("adapter.started platform=%s", adapter.platform)

    async def _health(self) -> dict[str, object]:
        async with self.store.read() as session:
            await session.exec(text("SELECT 1"))  # type: ignore[call-overload]
        return {"database": "ok", "adapters": [a.platform for a in self.adapters]}

    def attach(self, adapter: Adapter) -> None:
        self.pipeline.attach(adapter)
        self.adapters.append(adapter)

    async def close(self, drain_timeout: float = 30.0) -> None:
        if hasattr(self, "scheduler"):
            await self.scheduler.stop(drain_timeout)
        if hasattr(self, "pipeline"):
            await self.pipeline.drain(drain_timeout)
        for adapter in reversed(self.adapters):
            try:
                await adapter.stop()
            except Exception:
                log.exception("adapter.stop_failed platform=%s", adapter.platform)
        if self.web is not None:
            await self.web.stop()
        if self.provider is not None:
            await self.provider.aclose()
        if hasattr(self, "store"):
            await self.store.dispose()


def load_adapter(name: str, settings: Settings, secrets: Secrets) -> Adapter:
    """Import `adapters.<name>` only now, and build its adapter."""
    try:
        module = importlib.import_module(f"adapters.{name}")
        factory = module.create_adapter
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get(name)
        if extra and exc.name and not exc.name.startswith("adapters"):
            raise ConfigError(
                f"[{name}] is enabled but its library is missing ({exc.name}); "
                f"install it with: pip install 'switchboard[{extra}]'"
            ) from None
        raise ConfigError(f"no adapter named {name!r}") from None
    except AttributeError:
        raise StartupError(f"adapters.{name} has no create_adapter()") from None
    adapter: Adapter = factory(settings, secrets)
    return adapter
