"""Finding things by their words: a small BM25 index (`TermIndex`), and the
`tool_search` tool that offers many tools without sending their definitions.

A run whose searchable tools (MCP tools: `searchable = True`) number more than
`[mcp] inline_max_tools` gets none of them inline: it gets `tool_search`
instead (`offer`). The model searches by words; the best matches (at most
five) come back with their descriptions and input schemas, and become
callable for the rest of the run (`ToolSearch.take_found`, which the agent
loop reads after each tool step). The definitions every run sends stay the
same, so the prompt's cached prefix does too; the tools found are appended
after it (`LLMRequest.cached_tools`).

`TermIndex` knows nothing of tools: any "search" over names and descriptions
(skills, later) can use it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bot.errors import ToolFailed
from bot.ports import Tool, ToolContext
from bot.types import Role

K = TypeVar("K", bound=Hashable)

MAX_MATCHES = 5
_RUN = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an and are as at be by can do for from how i in into is it me my of on or "
        "please some that the this to tool tools use with you your",
    )
)


def terms(text: str) -> list[str]:
    """`text`'s words for matching: split at anything not a letter or digit
    and inside camelCase, lowercased, common words left out, a plural's "s"
    dropped (so "tickets" finds "ticket")."""
    words: list[str] = []
    for run in _RUN.findall(text):
        for word in _CAMEL.findall(run) if run.isascii() else (run,):
            word = word.lower()
            if word in _STOP:
                continue
            if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
                word = word[:-1]
            words.append(word)
    return words


@dataclass(frozen=True, slots=True)
class Entry(Generic[K]):
    key: K
    name: str
    """Counts twice: a word of the name says more than one of the description."""
    text: str


class TermIndex(Generic[K]):
    """BM25 (k1 = 1.2, b = 0.75) over entries' names and texts."""

    K1 = 1.2
    B = 0.75

    def __init__(self, entries: Sequence[Entry[K]]) -> None:
        self._entries = list(entries)
        self._docs: list[Counter[str]] = []
        frequency: Counter[str] = Counter()
        for entry in self._entries:
            name = terms(entry.name)
            doc = Counter(name + name + terms(entry.text))
            self._docs.append(doc)
            frequency.update(doc.keys())
        count = len(self._docs)
        self._average = sum(sum(d.values()) for d in self._docs) / count if count else 0.0
        self._idf = {
            term: math.log(1 + (count - seen + 0.5) / (seen + 0.5))
            for term, seen in frequency.items()
        }

    def search(self, query: str, limit: int = MAX_MATCHES) -> list[tuple[K, float]]:
        """The best entries for `query`, best first (only those matching a
        word of it; an entry named exactly `query` first of all)."""
        wanted = set(terms(query))
        scored: list[tuple[float, int]] = []
        exact = query.strip().lower()
        for i, doc in enumerate(self._docs):
            length = sum(doc.values())
            score = 0.0
            for term in wanted:
                tf = doc.get(term, 0)
                if not tf:
                    continue
                norm = tf + self.K1 * (1 - self.B + self.B * length / (self._average or 1))
                score += self._idf[term] * tf * (self.K1 + 1) / norm
            if self._entries[i].name.lower() == exact:
                score += 1000.0
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [(self._entries[i].key, score) for score, i in scored[:limit]]


SEARCH_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What the tool should do, in a few words (e.g. 'create ticket')",
        }
    },
    "required": ["query"],
}


class ToolSearch:
    """`tool_search`, for one run: finds among `tools` (not sent inline) and
    makes what it finds callable in the run."""

    name = "tool_search"
    description = (
        "Find more tools: many tools are available that are not listed here. Search them "
        "by what they should do; the best matches (up to 5) come back with their input "
        "schemas, and from then on you can call them directly in this conversation turn. "
        "Search before saying you cannot do something a tool might do."
    )
    input_schema = SEARCH_SCHEMA
    min_role = Role.GUEST
    module = "core"
    effect = "read"
    trusted_output = True
    """Its text is the tools' definitions, which the operator's configuration
    offers (the same text that would otherwise be sent inline)."""

    def __init__(self, tools: Sequence[Tool], limit: int = MAX_MATCHES) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._limit = limit
        self._index: TermIndex[str] | None = None
        self._found: list[Tool] = []
        self._given: set[str] = set()

    @property
    def catalogue(self) -> Sequence[Tool]:
        return list(self._tools.values())

    def take_found(self) -> list[Tool]:
        """The tools found since the last call (each once)."""
        found, self._found = self._found, []
        return found

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            raise ToolFailed("query is required: a few words saying what the tool should do")
        if self._index is None:  # most runs never search
            self._index = TermIndex(
                [Entry(t.name, t.name, t.description) for t in self._tools.values()]
            )
        matches = [self._tools[key] for key, _ in self._index.search(query, self._limit)]
        for tool in matches:
            if tool.name not in self._given:
                self._given.add(tool.name)
                self._found.append(tool)
        if not matches:
            return (
                f"No tool matches {query!r} (of {len(self._tools)}). Try other words, "
                "e.g. the kind of thing to act on (ticket, file, page) and the action."
            )
        parts = [f"{len(matches)} of {len(self._tools)} tools match; you can call them now:"]
        for tool in matches:
            schema = json.dumps(dict(tool.input_schema), ensure_ascii=False, sort_keys=True)
            parts.append(f"## {tool.name}\n{tool.description.strip()}\nInput schema: {schema}")
        return "\n\n".join(parts)


def offer(tools: Sequence[Tool], inline_max: int) -> tuple[tuple[Tool, ...], ToolSearch | None]:
    """A run's tools as the model gets them: all of them when the searchable
    ones are at most `inline_max`; else the others and `tool_search` (in their
    place), which finds the searchable ones."""
    searchable = [tool for tool in tools if getattr(tool, "searchable", False)]
    if len(searchable) <= inline_max:
        return tuple(tools), None
    search = ToolSearch(searchable)
    return (*(t for t in tools if not getattr(t, "searchable", False)), search), search
