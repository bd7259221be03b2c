"""Finding tools by their words: the BM25 index and `tool_search`, which
offers many tools without sending them and makes what it finds callable."""

from __future__ import annotations

from bot.ports import ToolContext
from bot.tools.search import Entry, TermIndex, ToolSearch, offer, terms
from bot.types import Role
from tests.probes import ProbeTool

CTX = ToolContext(1, Role.USER, 1, "console:room:-", "console", "run-1")


def test_terms_split_names_and_drop_common_words() -> None:
    assert terms("mcp__tickets__createTicket for the HTTPServer") == [
        "mcp", "ticket", "create", "ticket", "http", "server",
    ]  # fmt: skip
    assert terms("Überprüfung der Rechnungen") == ["überprüfung", "der", "rechnungen"]


def test_bm25_ranks_by_rare_words_and_names_first() -> None:
    index = TermIndex(
        [
            Entry("a", "create_ticket", "Create a ticket in the tracker."),
            Entry("b", "search_tickets", "Search tickets by words."),
            Entry("c", "send_mail", "Send an email; can mention a ticket number."),
            Entry("d", "weather", "The forecast for a city."),
        ]
    )
    assert [key for key, _ in index.search("create ticket")][:2] == ["a", "b"]
    assert [key for key, _ in index.search("email")] == ["c"]
    assert index.search("nothing matches this") == []
    assert index.search("weather")[0][0] == "d"  # the exact name first
    assert len(index.search("ticket", limit=2)) == 2


async def test_tool_search_finds_at_most_five_and_hands_each_over_once() -> None:
    tools = [
        ProbeTool(f"mcp__box__t{i}", description=f"Invoice report number {i}") for i in range(8)
    ]
    search = ToolSearch(tools)
    text = await search.run({"query": "invoice report"}, CTX)
    assert text.startswith("5 of 8 tools match; you can call them now:")
    assert text.count("\n## mcp__box__t") == 5 and "Input schema: {" in text
    assert len(search.take_found()) == 5 and search.take_found() == []
    await search.run({"query": "invoice report"}, CTX)
    assert search.take_found() == []  # already handed over
    none = await search.run({"query": "weather"}, CTX)
    assert none.startswith("No tool matches 'weather' (of 8)")


def test_offer_inlines_up_to_the_limit_then_searches() -> None:
    core = ProbeTool("current_time")
    mcp = [ProbeTool(f"mcp__box__t{i}") for i in range(3)]
    for tool in mcp:
        tool.searchable = True  # type: ignore[attr-defined]
    inline, search = offer([core, *mcp], 3)
    assert [t.name for t in inline] == ["current_time", *(t.name for t in mcp)] and search is None
    inline, search = offer([core, *mcp], 2)
    assert [t.name for t in inline] == ["current_time", "tool_search"] and search is not None
    assert [t.name for t in search.catalogue] == [t.name for t in mcp]
