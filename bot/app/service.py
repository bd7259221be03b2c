"""Wiring and lifecycle: store, provider, tools, pipeline, adapters.

`App.open()` prepares everything that does not talk to a chat platform
(database upgrade, persona sync, provider); `start_adapters()` loads the
adapters named in config lazily, so a platform library is only imported when
that platform is enabled.

Over 500 lines: the order in which the service's parts are built, started and
stopped is one story (each part's own wiring lives in `bot.app.wiring` and the
parts' packages).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from bot.accounts.audit import Audit
from bot.accounts.budgets import Budgets
from bot.accounts.identity import Identity
from bot.accounts.ops import AdminOps
from bot.agent.compaction import Summarizer
from bot.agent.events import EventBus
from bot.agent.executor import ToolExecutor
from bot.agent.flush import MemoryFlush
from bot.agent.guard import Guard
from bot.agent.loop import AgentLoop
from bot.app.counted import CountedProvider
from bot.app.health import DatabaseHealth
from bot.app.provider import BackgroundProvider
from bot.app.wiring import build_extras, forget_changes_elsewhere, sync_jobs_changed_elsewhere
from bot.commands.actions import action_commands
from bot.commands.core import core_commands
from bot.commands.registry import Commands, CommandSpec
from bot.config import MediaSettings, Secrets, Settings
from bot.conversations import Conversations
from bot.errors import ConfigError, StartupError
from bot.llm.gate import FairLimiter, GatedProvider
from bot.llm.pricing import unpriced
from bot.llm.providers import build_router, uses_builtin
from bot.llm.router import Observer
from bot.mcp.metrics import McpMetrics
from bot.mcp.status import check_personas
from bot.media import Media, build_media
from bot.metrics import Metrics
from bot.personas import sync_personas
from bot.pipeline.compactor import Compactor
from bot.pipeline.control import RunControl, stop_command
from bot.pipeline.handle import Pipeline
from bot.pipeline.intake import Inbox
from bot.pipeline.outbox import Outbox
from bot.pipeline.persist import Spool, TurnWriter
from bot.pipeline.recovery import Housekeeper
from bot.pipeline.services import Services
from bot.ports import Adapter, Provider, Tool, WebHooks, is_ready
from bot.scheduling.scheduler import Scheduler
from bot.scheduling.wakeups import Clock
from bot.store import Store
from bot.store.coordination import Coordination
from bot.store.instances import Instances
from bot.store.leases import Leases
from bot.store.memories import MemoryStore
from bot.tools.actions import PendingActions
from bot.tools.builtin import core_tools
from bot.tools.errors import ErrorChannel
from bot.tools.memory import memory_tools
from bot.tools.registry import ToolRegistry
from bot.tools.results import GetToolResult, ResultStore
from bot.tools.web import WebTools, web_tools
from bot.types import utcnow

if TYPE_CHECKING:  # imported when `start` serves HTTP: `switchboard chat` never does
    from bot.web.server import WebServer

if TYPE_CHECKING:
    from bot.mcp.servers import McpServers

log = logging.getLogger("switchboard.app")

EXTRAS = {"telegram": "telegram", "slack": "slack", "discord": "discord", "console": "console"}
HEALTH_TIMEOUT_S = 0.8
"""/healthz answers within a second, even when the database does not."""
HEALTH_GRACE_S = 10.0
"""A database slower than that deadline still counts as alive for this long
after its last answer."""


PROVIDER_MODULE = "bot.llm.warm_up"
"""Imported lazily (the SDK takes seconds to import), in a worker thread so
the event loop never stalls on it (`import_provider`); it imports the
provider, `bot.llm.anthropic`."""


def make_provider(
    settings: Settings, secrets: Secrets, on_fallback: Observer | None = None
) -> Provider:
    return provider_factory(settings, secrets, on_fallback)()


def provider_factory(
    settings: Settings, secrets: Secrets, on_fallback: Observer | None = None
) -> Callable[[], Provider]:
    """What builds the configured providers (`bot.llm.router`): their settings
    are checked now (a missing key raises here), each SDK is imported on the
    first call that needs it. The built-in provider's key is required only
    when a configured model is served by it."""
    key = secrets.anthropic_api_key
    api_key = key.get_secret_value() if key is not None else None
    if uses_builtin(settings.configured_models()):
        api_key = secrets.require("anthropic_api_key")
    from_sdk = settings.llm.base_url is None and os.environ.get("ANTHROPIC_BASE_URL")
    url_setting = "ANTHROPIC_BASE_URL" if from_sdk else "llm.base_url"
    router = build_router(
        settings.llm,
        os.environ,
        builtin_key=api_key,
        builtin_url_setting=url_setting,
        on_fallback=on_fallback,
    )
    return lambda: router


def check_models(settings: Settings, persona_models: Sequence[str]) -> None:
    """Every model the personas name has a configured provider (else a
    `ConfigError`); a WARNING for each configured model without a price (it
    is charged at the highest configured price)."""
    for name in persona_models:
        try:
            settings.llm.check_model(name, "persona model")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    models = [*settings.configured_models(), *persona_models]
    for model in unpriced(models, settings.llm.prices):
        log.warning(
            "llm.unpriced model=%s: no [llm.prices] entry; its calls are charged at the "
            "highest configured price",
            model,
        )


async def import_provider() -> None:
    """Import the SDK and build what it builds lazily on its first reply
    (`bot.llm.warm_up`), off the event loop; `make_provider` then finds it
    loaded, and the first model call does not stall the loop."""
    await asyncio.to_thread(lambda: importlib.import_module(PROVIDER_MODULE).warm_up())


@dataclass
class App:
    settings: Settings
    secrets: Secrets
    provider: Provider | None = None
    extra_tools: Sequence[Tool] = ()
    provider_in_background: bool = False
    """Without a `provider`: `open` does not wait for the SDK to load; it
    loads from `provider.start()` or the first call (`BackgroundProvider`)."""
    clock: Clock = utcnow
    """The scheduler's clock (tests pass a controllable one)."""
    instance: str = field(default_factory=lambda: instance_name())
    """This process in leases (`bot.pipeline.intake`)."""
    store: Store = field(init=False)
    housekeeper: Housekeeper = field(init=False)
    pipeline: Pipeline = field(init=False)
    scheduler: Scheduler = field(init=False)
    adapters: list[Adapter] = field(default_factory=list, init=False)
    web: WebServer | None = field(default=None, init=False)
    metrics: Metrics = field(default_factory=Metrics, init=False)
    """What `GET /metrics` serves; counted by the pipeline, tools, LLM calls, wakeups."""
    ops: AdminOps = field(init=False)
    """Budget and role changes (audited), for the admin dashboard."""
    _expected: list[str] = field(default_factory=list, init=False)
    """Platforms being started: not ready until their adapter runs."""
    llm_gate: FairLimiter = field(init=False)
    """LLM calls in flight (`[llm] max_in_flight`), oldest message first."""
    web_tools: WebTools = field(default_factory=WebTools, init=False)
    """`web_fetch` and `web_search` (`[web]`), with their HTTP clients."""
    mcp: McpServers | None = field(default=None, init=False)
    """The MCP servers whose tools the agent gets (`[mcp]`), connected in the background."""
    media: Media = field(default_factory=lambda: Media(MediaSettings()), init=False)
    """What people send, for the model (`[media]`), with the transcription client."""

    async def open(self) -> Pipeline:
        self.web_tools = web_tools(self.settings.web, os.environ, self.metrics)  # config first
        self.media = build_media(self.settings.media, None, os.environ, self.metrics)
        fallbacks = self.metrics.llm_fallback
        if self.provider is None and self.provider_in_background:
            build = provider_factory(self.settings, self.secrets, fallbacks)
            self.provider = BackgroundProvider(build, import_provider, build().supports)
        elif self.provider is None:
            await import_provider()
            self.provider = make_provider(self.settings, self.secrets, fallbacks)
        self.store = Store(
            self.settings.database.url,
            echo=self.settings.database.echo,
            busy_timeout_ms=self.settings.database.busy_timeout_ms,
            schema=self.settings.database.schema_name,
            pool_size=self.settings.database.pool_size,
            max_overflow=self.settings.database.max_overflow,
            pool_timeout=self.settings.database.pool_timeout_seconds,
            group_commit=self.settings.database.group_commit,
        )
        await self.store.upgrade()
        self._database_health = DatabaseHealth(
            self.store.ping, timeout=HEALTH_TIMEOUT_S, grace=HEALTH_GRACE_S
        )
        self._database_ready = DatabaseHealth(  # /readyz: our tables answer too
            self.store.ping_tables, timeout=HEALTH_TIMEOUT_S, grace=HEALTH_GRACE_S
        )
        self.llm_gate = FairLimiter(self.settings.llm.max_in_flight)
        gate = self.llm_gate
        self.metrics.watch_llm_gate(lambda: gate.held, lambda: gate.waiting)
        provider = GatedProvider(
            CountedProvider(self.provider, self.metrics, self.settings.llm.prices), self.llm_gate
        )
        personas = await sync_personas(self.store, self.settings.personas.dir)
        check_models(self.settings, personas.models())
        errors = ErrorChannel(self.store)
        agent, llm, durable = self.settings.agent, self.settings.llm, self.settings.inbox
        memories = MemoryStore(self.store)
        results = ResultStore(self.store, agent.tool_result_max_chars)
        self.media.results = results  # long documents are kept where tool results are
        memory = memory_tools(memories) if agent.memory else []
        call = llm.timeout_seconds * (llm.max_retries + 1) * (len(llm.fallback) + 1)  # the chain
        hold = agent.run_timeout_seconds + call + 60
        budgets = Budgets(
            self.store, self.settings.budgets, hold_seconds=hold, instance=self.instance
        )
        leases = Leases(self.store, self.instance, durable.lease_seconds)
        coordination = Coordination(self.store, leases, self.settings.database.schema_name)
        coordination.subscribe(budgets.heard)  # holds released elsewhere: waiting messages look
        inbox = Inbox(self.store, self.instance, durable.lease_seconds)
        self.metrics.watch_inbox(inbox.backlog)
        if (writes := self.store.sqlite_writes) is not None:
            self.metrics.watch_sqlite_writes(
                lambda: (writes.writes, writes.commits, writes.waited_s)
            )
        outbox = Outbox(self.store, self.instance, durable.lease_seconds)
        spool = Spool(spool_path(self.settings))
        writer = TurnWriter(
            self.store, budgets, outbox, spool, llm.prices, durable.write_retry_seconds
        )
        conversations = Conversations(self.store)
        audit = Audit(self.store)
        identity = Identity(
            self.store,
            self.settings.admin.owners,
            on_created=(budgets.user_created, memories.user_created),
            on_read=(
                budgets.account_read,
                lambda read: memories.presence_read(read.user_id, read.has_memories, read.read_at),
            ),
        )
        forget_changes_elsewhere(self.store, coordination, (identity, budgets, memories))
        extras = build_extras(
            self.settings,
            self.store,
            identity,
            budgets,
            conversations,
            personas,
            audit,
            self.clock,
            self.instance,
            leases,
            self.metrics,
        )
        self.scheduler = extras.scheduler
        sync_jobs_changed_elsewhere(self.store, coordination, self.scheduler)
        self.ops = extras.ops
        tools = ToolRegistry(
            [
                *core_tools(errors),
                GetToolResult(results),
                *memory,
                *extras.tools,
                *self.web_tools.tools,
                *self.extra_tools,
            ]
        )
        self.mcp = await self._mcp_servers(tools, personas.names())
        commands = Commands([], audit)
        control = RunControl(agent.max_concurrent)
        spec_list: list[CommandSpec] = core_commands(conversations, commands.specs)
        spec_list.append(stop_command(control, conversations, leases, coordination))
        for spec in [*spec_list, *extras.commands]:
            commands.add(spec)
        bus = EventBus()
        guard = Guard(agent.guard_mode, agent.max_message_chars)
        actions = PendingActions(
            self.store, audit, tools.get, expiry=timedelta(minutes=agent.confirm_minutes)
        )
        for spec in action_commands(actions):
            commands.add(spec)
        executor = ToolExecutor(
            errors,
            timeout=self.settings.llm.tool_timeout_seconds,
            results=results,
            actions=actions,
            guard=guard,
            metrics=self.metrics,
        )
        summarizer = Summarizer(
            provider,
            llm.auxiliary,
            max_tokens=agent.summary_max_tokens,
            timeout=agent.summary_timeout_seconds,
            fallback=llm.fallback,
        )
        flush = None
        if agent.memory and agent.memory_flush:
            flush = MemoryFlush(
                AgentLoop(provider, executor),  # internal: no events
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
                agent=AgentLoop(provider, executor, summarizer=summarizer, bus=bus),
                inbox=inbox,
                outbox=outbox,
                writer=writer,
                leases=leases,
                coordination=coordination,
                control=control,
                bus=bus,
                guard=guard,
                memories=memories,
                compactor=Compactor(
                    self.store, conversations, summarizer, flush, budgets, self.settings, leases
                ),
                actions=actions,
                metrics=self.metrics,
                media=self.media,
            )
        )
        self.housekeeper = Housekeeper(
            self.pipeline,
            self.store,
            inbox,
            outbox,
            spool,
            budgets,
            durable,
            leases=leases,
            coordination=coordination,
            instances=Instances(self.store, self.instance),
            renewals=[self.scheduler.renew_fires],
            takeovers=[self.scheduler.take_over_fires],
        )
        return self.pipeline

    async def _mcp_servers(self, tools: ToolRegistry, personas: Sequence[str]) -> McpServers | None:
        """The `[mcp]` servers, connecting in the background (the service
        starts and answers with a server down); their tools join `tools`. The
        SDK is imported only when a server is configured, off the event loop."""
        config = self.settings.mcp
        check_personas(config, personas)
        if not config.servers:
            return None
        module = await asyncio.to_thread(importlib.import_module, "bot.mcp.servers")
        metrics = McpMetrics(self.metrics.registry, list(config.servers))
        servers: McpServers = module.McpServers(config, tools.replace, metrics)
        servers.start()
        return servers

    def start_recovery(self, platforms: Sequence[str] | None = None) -> None:
        """Take over (now and every `[inbox] sweep_seconds`) what dead processes
        left for `platforms` (default: the attached adapters')."""
        self.housekeeper.start(
            [a.platform for a in self.adapters] if platforms is None else platforms
        )

    async def start_scheduler(self, platforms: Sequence[str] | None = None) -> None:
        """Start scheduled wakeups for `platforms` (default: the attached adapters')."""
        if not self.settings.scheduler.enabled:
            return
        served = [a.platform for a in self.adapters] if platforms is None else platforms
        await self.scheduler.start(self.pipeline, served)

    async def start_adapters(self, platforms: Sequence[str]) -> None:
        """Create the adapters named in config and start them."""
        for name in platforms:  # their libraries load off the event loop
            with contextlib.suppress(ImportError):  # load_adapter explains it
                await asyncio.to_thread(importlib.import_module, f"adapters.{name}")
        await self.start([load_adapter(name, self.settings, self.secrets) for name in platforms])

    async def start(self, created: Sequence[Adapter]) -> None:
        """Serve the adapters' HTTP routes (and /healthz, /readyz, /metrics),
        then start them."""
        from bot.web.server import WebServer

        server = self.settings.server
        self._expected = [adapter.platform for adapter in created]
        self.web = WebServer(
            server.host,
            server.port,
            self._health,
            max_body_bytes=server.max_body_bytes,
            readiness=self._readiness,
            metrics=self.metrics if server.metrics else None,
        )
        for adapter in created:
            if isinstance(adapter, WebHooks):
                self.web.add_routes(adapter.routes())
        if self.secrets.admin_token is not None:  # the dashboard; else /admin is 404
            from bot.web.admin import AdminDeps, admin_routes  # its pages load only then

            inbox = self.pipeline.s.inbox
            mcp = self.mcp.statuses if self.mcp is not None else None
            deps = AdminDeps(self.store, self.ops, self.scheduler.jobs, inbox.backlog, mcp)
            token = self.secrets.admin_token.get_secret_value()
            self.web.add_routes(admin_routes(deps, token, trust_proxy=server.trust_proxy))
        await self.web.start()
        for adapter in created:
            self.metrics.serve_platform(adapter.platform)
            self.pipeline.attach(adapter)
            await adapter.start(self.pipeline)
            self.adapters.append(adapter)
            log.info("adapter.started platform=%s", adapter.platform)

    async def _health(self) -> dict[str, object]:
        database = await self._database_health.check()
        return {"database": database, "adapters": [a.platform for a in self.adapters]}

    async def _readiness(self) -> tuple[bool, dict[str, object]]:
        """Ready: the database answers and every adapter is connected."""
        try:
            database = await self._database_ready.check()
        except Exception as exc:
            database = f"not answering ({type(exc).__name__})"
        running = {adapter.platform: adapter for adapter in self.adapters}
        adapters: dict[str, str] = {}
        for platform in dict.fromkeys([*self._expected, *running]):
            adapter = running.get(platform)
            if adapter is None:
                adapters[platform] = "starting"
            else:
                adapters[platform] = "ok" if await is_ready(adapter) else "not connected"
        ready = database in ("ok", "busy") and all(v == "ok" for v in adapters.values())
        detail: dict[str, object] = {"database": database, "adapters": adapters}
        if self.mcp is not None:  # shown, never a reason to be unready
            detail["mcp"] = {status.name: status.state for status in self.mcp.statuses()}
        return ready, detail

    def attach(self, adapter: Adapter) -> None:
        self.metrics.serve_platform(adapter.platform)
        self.pipeline.attach(adapter)
        self.adapters.append(adapter)

    async def close(self, drain_timeout: float = 30.0) -> None:
        """Stop intake, let running work finish (up to `drain_timeout`), hand
        back what is left (its leases end now, so the next process takes it at
        once), then stop the adapters."""
        if hasattr(self, "pipeline"):
            self.pipeline.close_intake()
            await self.housekeeper.stop()
        if hasattr(self, "scheduler"):
            await self.scheduler.stop(drain_timeout)
        if hasattr(self, "pipeline"):
            await self.pipeline.drain(drain_timeout)
            await self._hand_back()
        for adapter in reversed(self.adapters):
            try:
                await adapter.stop()
            except Exception:
                log.exception("adapter.stop_failed platform=%s", adapter.platform)
        if self.web is not None:
            await self.web.stop()
        if self.mcp is not None:
            await self.mcp.close()
        if self.provider is not None:
            await self.provider.aclose()
        await self.web_tools.aclose()
        if self.media.transcriber is not None:
            await self.media.transcriber.aclose()
        if hasattr(self, "store"):
            await self.store.dispose()

    async def _hand_back(self) -> None:
        s = self.pipeline.s
        try:
            messages = await s.inbox.release()
            replies = await s.outbox.release()
            fires = await self.scheduler.jobs.release()
            await s.leases.release_all()
            await s.coordination.close()
            await Instances(self.store, self.instance).remove()
        except Exception:
            log.exception("shutdown.hand_back_failed (leases expire on their own)")
            return
        if messages or replies or fires:
            log.info(
                "shutdown.handed_back messages=%d replies=%d fires=%d", messages, replies, fires
            )


def instance_name() -> str:
    """This process, as it appears in leases: host, pid and a random tag."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(3)}"


def spool_path(settings: Settings) -> Path:
    if settings.inbox.spool_path is not None:
        return settings.inbox.spool_path
    url = make_url(settings.database.url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).expanduser().with_suffix(".spool.jsonl")
    return Path("data/spool.jsonl")


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
