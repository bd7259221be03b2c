"""A scripted conversation for long-run tests and the context benchmark.

`ScriptedModel` is a responder for the fake Messages API: to each new question it
answers by calling the `search` tool, then answers from the results; summary and
memory-flush requests (recognized by their prompts) get a summary and NO_REPLY.
`search` returns results of varied size, every seventh one far over the
large-result limit. Everything depends only on the request, so it is
deterministic whatever the timing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.errors import ToolFailed
from bot.ports import ToolContext
from bot.types import Role
from tests.fakes.anthropic import last_user_text, text_reply, tool_call, tool_use_reply

TOPICS = (
    "the staging deploy",
    "database backups",
    "the billing service",
    "on-call rotation",
    "the search index",
    "TLS certificates",
    "the mobile release",
)


def question(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return f"Question {turn}: what is the current status of {topic}, and what changed lately?"


def result_text(turn: int) -> str:
    size = 20_000 if turn % 7 == 3 else 1_200 + 150 * (turn % 5)
    line = f"[turn {turn}] log entry about {TOPICS[turn % len(TOPICS)]}; all checks passed. "
    return (line * (size // len(line) + 1))[:size]


@dataclass
class SearchTool:
    name: str = "search"
    description: str = "Search the team's logs and documents."
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {"q": {"type": "string"}, "turn": {"type": "integer"}},
            "required": ["q"],
        }
    )
    min_role: Role = Role.GUEST
    module: str = "test"
    effect: str = "read"
    calls: int = 0

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls += 1
        try:
            return result_text(int(args.get("turn", 0)))
        except (TypeError, ValueError):
            raise ToolFailed("turn must be a number") from None


def is_summary(body: Mapping[str, Any]) -> bool:
    return "running summary" in json.dumps(body.get("system"))


def is_flush(body: Mapping[str, Any]) -> bool:
    return "[Memory flush" in json.dumps(body.get("messages"))


@dataclass
class ScriptedModel:
    summaries: int = 0
    flushes: int = 0
    main: int = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        if is_summary(body):
            self.summaries += 1
            turns = sorted({int(t) for t in re.findall(r"Question (\d+)", json.dumps(body))})
            covered = f"{turns[0]}–{turns[-1]}" if turns else "none"
            return text_reply(
                f"- The user asked about infrastructure topics (questions {covered}).\n"
                "- Each answer came from a search of the logs; all checks passed.\n"
                + "- Detail kept for later: "
                + "status stable, nothing urgent. " * 12
            )
        if is_flush(body):
            self.flushes += 1
            return text_reply("NO_REPLY")
        self.main += 1
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        if body.get("tool_choice") == {"type": "none"} or any(
            b.get("type") == "tool_result" for b in blocks
        ):
            turn = _turn(body)
            return text_reply(
                f"About question {turn}: everything is in order; the logs show "
                "routine changes only. " + "Details follow in short. " * 8
            )
        turn = _turn(body)
        return tool_use_reply(
            tool_call("search", {"q": TOPICS[turn % len(TOPICS)], "turn": turn}),
            text="Let me look that up.",
        )


def _turn(body: Mapping[str, Any]) -> int:
    found = re.findall(r"Question (\d+):", last_user_text(body)) or re.findall(
        r"Question (\d+):", json.dumps(body.get("messages"))
    )
    return int(found[-1]) if found else 0
