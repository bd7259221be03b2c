"""What skills and sub-agents cost (`make bench`). Prints figures; asserts nothing.

Through the real pipeline and the anthropic SDK against the fake Messages API
(tokens: JSON characters / 4, as the fake counts them; prompt caching
simulated):

- skills: the input tokens of a fresh "hi" with 0, 15 and 40 skills installed
  (15: each one's name and description in the prompt; 40: past `[skills]
  inline_max`, none listed, `skill_search` instead);
- sub-agents: one task ("read these three pages and summarise each", pages of
  3,000 characters) done inline (the run fetches the pages itself) and
  delegated (`delegate_task`: a child fetches and summarises), then a
  follow-up question in the same conversation: the tokens and cost of each
  turn, as recorded in `token_logs`.

    python -m tests.benchmarks.agent_costs
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from bot.app import App
from bot.config import Secrets, Settings
from bot.ports import ToolContext
from bot.store.models import TokenLog
from bot.types import IncomingMessage, Reply, Role, Target
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_call, tool_use_reply

KEY = "sk-ant-bench"
TOPICS = (
    "bug triage", "release checklists", "incident reviews", "on-call handover",
    "customer escalations", "database migrations", "access requests", "vendor invoices",
    "hiring loops", "weekly reports", "security reviews", "code review etiquette",
    "dependency upgrades", "feature flags", "data exports", "translation requests",
    "office moves", "travel bookings", "expense claims", "laptop setup",
    "API deprecations", "status pages", "load tests", "backups", "DNS changes",
    "certificate renewals", "budget planning", "roadmap updates", "user interviews",
    "design critiques", "accessibility audits", "privacy requests", "legal holds",
    "press inquiries", "conference talks", "onboarding buddies", "offboarding",
    "team retros", "quarterly goals", "support macros",
)  # fmt: skip
PAGE = "The quarterly report covers revenue, hiring and the roadmap in detail. " * 43


class NullAdapter:
    platform = "bench"

    async def start(self, core: object) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        return ["1"]

    async def show_typing(self, target: Target) -> None: ...


def write_skills(root: Path, count: int) -> None:
    for topic in TOPICS[:count]:
        name = topic.lower().replace(" ", "-")
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f'---\nname: {name}\ndescription: "How our team handles {topic}: the steps, '
            f'who to ask and the checks before closing. Use when someone asks about {topic}."'
            f"\n---\n\n# {topic}\n\n" + "1. A step of the procedure.\n" * 30
        )


def settings(tmp: Path, fake: FakeAnthropic, **sections: Any) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": f"sqlite+aiosqlite:///{tmp / 'bench.db'}"},
            "llm": {"base_url": fake.base_url},
            "budgets": {"guest": "unlimited"},
            "logging": {"level": "WARNING"},
            **sections,
        }
    )


def msg(text: str) -> IncomingMessage:
    return IncomingMessage(
        platform="bench", platform_user_id="alice", platform_channel_id="c", text=text
    )


async def hi_with_skills(count: int) -> tuple[int, int]:
    """(input tokens of a fresh "hi", tool definitions sent) with `count` skills."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        write_skills(tmp / "skills", count)
        async with FakeAnthropic(api_key=KEY) as fake:
            fake.script("Hello!")
            app = App(
                settings(tmp, fake, skills={"paths": [str(tmp / "skills")]}),
                Secrets(anthropic_api_key=KEY),  # type: ignore[arg-type]
            )
            await app.open()
            app.attach(NullAdapter())
            try:
                await app.pipeline.handle(msg("hi"))
                async with app.store.read() as session:
                    (log,) = (await session.exec(select(TokenLog))).all()
            finally:
                await app.close()
            tools = len(fake.last_request.body.get("tools", []))
    return log.input_tokens + log.cache_read_tokens + log.cache_write_tokens, tools


@dataclass
class FetchPage:
    name: str = "fetch_page"
    description: str = "Fetch one of the team's pages by its number."
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"n": {"type": "integer"}}}
    )
    min_role: Role = Role.GUEST
    module: str = "bench"
    effect: str = "read"
    trusted_output: bool = True

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return f"Page {args.get('n')}: {PAGE}"


def is_child(body: Mapping[str, Any]) -> bool:
    return "You are a helper agent" in json.dumps(body.get("system"))


def responder(delegate: bool) -> Any:
    """The model: fetches three pages (itself, or through a child) and
    summarises; answers the follow-up at once."""

    def answer(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]["content"]
        reading = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        question = json.dumps(body["messages"][-1])
        if "thanks" in question and not reading:
            return text_reply("You're welcome: pages 1 to 3 are summarised above.")
        summary = text_reply("Page 1, 2 and 3: the quarterly report (revenue, hiring, roadmap).")
        if reading:
            return summary
        if delegate and not is_child(body):
            task = "Read pages 1, 2 and 3 (fetch_page) and summarise each in one line."
            return tool_use_reply(tool_call("delegate_task", {"task": task}))
        return tool_use_reply(*(tool_call("fetch_page", {"n": n}) for n in (1, 2, 3)))

    return answer


async def task_costs(delegate: bool) -> list[tuple[int, int, float]]:
    """(LLM calls, input + output tokens, cost) of the task's turn and the follow-up's."""
    with tempfile.TemporaryDirectory() as name:
        async with FakeAnthropic(api_key=KEY, simulate_cache=True) as fake:
            fake.responder = responder(delegate)
            app = App(
                settings(Path(name), fake, agent={"subagent_min_role": "guest"}),
                Secrets(anthropic_api_key=KEY),  # type: ignore[arg-type]
                extra_tools=(FetchPage(),),
            )
            await app.open()
            app.attach(NullAdapter())
            figures = []
            try:
                for text in ("read pages 1-3 and summarise each", "thanks!"):
                    outcome = await app.pipeline.handle(msg(text))
                    async with app.store.read() as session:
                        logs = (
                            await session.exec(
                                select(TokenLog).where(col(TokenLog.run_id) == outcome.run_id)
                            )
                        ).all()
                    tokens = sum(
                        t.input_tokens + t.cache_read_tokens + t.cache_write_tokens
                        + t.output_tokens
                        for t in logs
                    )  # fmt: skip
                    figures.append((len(logs), tokens, sum(t.cost_usd or 0.0 for t in logs)))
            finally:
                await app.close()
    return figures


async def main_async() -> None:
    print('Skills: input tokens of a fresh "hi" (the fake\'s count, JSON chars / 4)')
    for count in (0, 15, 40):
        tokens, tools = await hi_with_skills(count)
        mode = "listed" if 0 < count <= 15 else ("skill_search" if count else "none")
        print(f"  {count:>3} skills ({mode:<12}){tokens:>10,} tokens   ({tools} tool definitions)")
    print("Sub-agents: one task (3 pages of 3,000 chars, summarised), then a follow-up")
    print(f"  {'':<38}{'calls':>6}{'tokens':>10}{'cost USD':>11}")
    for label, delegate in (("inline", False), ("delegated (delegate_task)", True)):
        turns = await task_costs(delegate)
        for (calls, tokens, cost), turn in zip(turns, ("task", "follow-up"), strict=True):
            print(f"  {label + ', ' + turn:<38}{calls:>6}{tokens:>10,}{cost:>11.4f}")


def main() -> None:
    asyncio.run(main_async())


if __name__ == "__main__":
    main()
