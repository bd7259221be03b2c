"""What a run may do on its own: the untrusted sources in its context at the
start (`Taint`), and the confirmation prompts for calls it held.

A request is direct when the requester is the only person speaking in the
conversation and nothing untrusted is in the context: no other person's
message (in the history or joining the run), no tool output from elsewhere in
the history, no recalled memory, and not a wakeup's own prompt. The agent loop
adds "tool_result" as soon as such output enters the run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from bot.agent.untrusted import private_tools
from bot.conversations import HistoryRow
from bot.ports import Taint, Tool
from bot.tools.actions import Held, output_trusted
from bot.tools.registry import ToolRegistry
from bot.tools.search import ToolSearch
from bot.types import IncomingMessage, Reply, Role


def initial_taint(
    first: IncomingMessage,
    messages: Iterable[IncomingMessage],
    history: Sequence[HistoryRow],
    user_id: int,
    memories: Sequence[str],
    lookup: Callable[[str], Tool | None],
) -> Taint:
    taint = Taint()
    if first.source == "scheduler":
        taint.add("wakeup")
    if memories:
        taint.add("memory")
    if any(msg.platform_user_id != first.platform_user_id for msg in messages):
        taint.add("others")
    called = {row.tool_use_id: row.tool_name for row in history if row.role == "tool_call"}
    for row in history:
        if row.role == "user" and row.user_id is not None and row.user_id != user_id:
            taint.add("history")
        elif row.role == "tool_result":
            tool = lookup(row.tool_name or called.get(row.tool_use_id) or "")
            if tool is None or not output_trusted(tool):
                taint.add("history")
    return taint


def joined(taint: Taint, first: IncomingMessage, arrived: Iterable[IncomingMessage]) -> None:
    """Messages that joined a running run: another person's taints it."""
    if any(msg.platform_user_id != first.platform_user_id for msg in arrived):
        taint.add("others")


def prompts(held: Sequence[Held], first: IncomingMessage) -> tuple[Reply, ...]:
    """One Confirm / Cancel prompt per held call, where the request came from."""
    target = first.target(as_reply=first.chat_type == "group")
    return tuple(Reply(h.prompt, target, "notice", buttons=h.buttons) for h in held)


def tool_kinds(tools: ToolRegistry) -> tuple[frozenset[str], frozenset[str]]:
    """Of every tool: the names of those whose results are private, and of
    those whose results are our own text (trusted)."""
    every_tool = [*tools.available(Role.OWNER, None), ToolSearch(())]
    return private_tools(every_tool), frozenset(t.name for t in every_tool if output_trusted(t))


def known_tools(tools: ToolRegistry) -> Callable[[str], Tool | None]:
    """A tool by name, as a run's history may name it: the registry's, and
    `tool_search` (made for each run that searches)."""
    search = ToolSearch(())

    def lookup(name: str) -> Tool | None:
        return search if name == search.name else tools.get(name)

    return lookup
