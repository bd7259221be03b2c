"""bot.formatting: the Markdown IR and the shared splitter."""

from __future__ import annotations

import re

import pytest

from bot.formatting import (
    Block,
    BlockQuote,
    Break,
    CodeBlock,
    CodeSpan,
    Heading,
    HorizontalRule,
    Image,
    Link,
    ListBlock,
    Paragraph,
    Span,
    Styled,
    Table,
    Text,
    Wrap,
    flatten,
    format_table,
    group,
    layout_list,
    merge_runs,
    parse,
    plain_text,
    prefix_lines,
    split_chunks,
    utf16_len,
)


def para(*children: object) -> Paragraph:
    return Paragraph(tuple(Text(c) if isinstance(c, str) else c for c in children))  # type: ignore[misc]


PARSE_CASES: list[tuple[str, str, tuple[Block, ...]]] = [
    ("empty", "", ()),
    ("whitespace", "  \n\n \t", ()),
    ("paragraph", "hello world", (para("hello world"),)),
    ("two paragraphs", "a\n\nb", (para("a"), para("b"))),
    ("soft break", "a\nb", (para("a", Break(False), "b"),)),
    ("hard break", "a  \nb", (para("a", Break(True), "b"),)),
    ("strong", "**b**", (para(Styled("strong", (Text("b"),))),)),
    ("em", "*i* _j_", (para(Styled("em", (Text("i"),)), " ", Styled("em", (Text("j"),))),)),
    ("strike", "~~s~~", (para(Styled("strike", (Text("s"),))),)),
    (
        "nested styles",
        "**a *b* c**",
        (para(Styled("strong", (Text("a "), Styled("em", (Text("b"),)), Text(" c")))),),
    ),
    ("code span", "x `a<b>` y", (para("x ", CodeSpan("a<b>"), " y"),)),
    (
        "link",
        "[the **site**](https://example.com/a?b=1&c=2)",
        (
            para(
                Link(
                    "https://example.com/a?b=1&c=2",
                    (Text("the "), Styled("strong", (Text("site"),))),
                )
            ),
        ),
    ),
    ("autolink", "<https://x.org>", (para(Link("https://x.org", (Text("https://x.org"),))),)),
    ("linkify is off", "see https://x.org now", (para("see https://x.org now"),)),
    ("image", "![a *cat*](http://i/c.png)", (para(Image("http://i/c.png", "a cat")),)),
    ("raw html is text", "<b>hi</b> & <!channel>", (para("<b>hi</b> & <!channel>"),)),
    (
        "html block is text",
        "<div>\nx\n</div>",
        (para("<div>", Break(False), "x", Break(False), "</div>"),),
    ),
    ("entities decoded", "&amp; &lt;", (para("& <"),)),
    ("backslash escape", r"\*not em\*", (para("*not em*"),)),
    ("heading", "## Title *x*", (Heading(2, (Text("Title "), Styled("em", (Text("x"),)))),)),
    ("fence with lang", "```python extra\nprint(1)\n```", (CodeBlock("python", "print(1)\n"),)),
    ("fence without lang", "```\na\n\nb\n```", (CodeBlock("", "a\n\nb\n"),)),
    ("indented code", "    code <x>", (CodeBlock("", "code <x>\n"),)),
    ("hr", "a\n\n---\n\nb", (para("a"), HorizontalRule(), para("b"))),
    ("blockquote", "> q\n>\n> r", (BlockQuote((para("q"), para("r"))),)),
    ("nested quote", "> a\n> > b", (BlockQuote((para("a"), BlockQuote((para("b"),)))),)),
    (
        "bullet list",
        "- a\n- b\n  - c",
        (
            ListBlock(
                False,
                1,
                ((para("a"),), (para("b"), ListBlock(False, 1, ((para("c"),),)))),
            ),
        ),
    ),
    ("ordered list start", "3. x\n4. y", (ListBlock(True, 3, ((para("x"),), (para("y"),))),)),
    (
        "table",
        "| a | b | c |\n|:-|:-:|--:|\n| 1 | `2` |\n",
        (
            Table(
                ("left", "center", "right"),
                ((Text("a"),), (Text("b"),), (Text("c"),)),
                (((Text("1"),), (CodeSpan("2"),), ()),),
            ),
        ),
    ),
    ("spoiler", "a ||b|| c", (para("a ", Styled("spoiler", (Text("b"),)), " c"),)),
    (
        "spoiler around formatting",
        "||x **y**||",
        (para(Styled("spoiler", (Text("x "), Styled("strong", (Text("y"),))))),),
    ),
    (
        "two spoilers",
        "||a|| and ||b||",
        (para(Styled("spoiler", (Text("a"),)), " and ", Styled("spoiler", (Text("b"),))),),
    ),
    ("unpaired spoiler marker", "a || b", (para("a || b"),)),
    ("empty spoiler", "a |||| b", (para("a |||| b"),)),
    ("spoiler not in code", "`||x||`", (para(CodeSpan("||x||")),)),
    ("escaped spoiler marks", r"a \|\|b\|\| &#124;&#124;c&#124;&#124;", (para("a ||b|| ||c||"),)),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse(markdown: str, expected: tuple[Block, ...]) -> None:
    assert parse(markdown) == expected


def test_nodes_are_frozen_and_slotted() -> None:
    node = Text("x")
    with pytest.raises(AttributeError):
        node.text = "y"  # type: ignore[misc]
    assert not hasattr(node, "__dict__")


def test_plain_text() -> None:
    (p,) = parse("a **b** `c` [d](http://x) ![e](http://y)\nf  \ng")
    assert isinstance(p, Paragraph)
    assert plain_text(p.children) == "a b c d e f\ng"


def test_format_table_aligns_columns() -> None:
    (table,) = parse("| name | qty | mid |\n|---|--:|:-:|\n| apple | 3 | x |\n| 日本 | 10 | yyy |")
    assert isinstance(table, Table)
    assert format_table(table).split("\n") == [
        "name  | qty | mid",
        "------+-----+----",
        "apple |   3 |  x",
        "日本  |  10 | yyy",
    ]


# ------------------------------------------------------------------ span helpers


def test_flatten_and_group() -> None:
    span = group(["a", Wrap("<b>", "</b>", ("b",)), "c"], " ")
    assert flatten(span) == "a <b>b</b> c"


def test_prefix_lines_skips_verbatim() -> None:
    code = Wrap("```\n", "\n```", ("x\ny",), True)
    span = prefix_lines(group(["a\nb", Wrap("*", "*", ("c\nd",)), code]), "> ", "| ")
    assert flatten(span) == "> a\n| b*c\n| d*```\nx\ny\n```"


def test_merge_runs_keeps_code_separate() -> None:
    code = Wrap("<pre>", "</pre>", ("x",), True)
    merged = merge_runs(["a", "b", code, "c"], "\n")
    assert [flatten(m) for m in merged] == ["a\nb", "<pre>x</pre>", "c"]


def test_layout_list() -> None:
    code = Wrap("<pre>", "</pre>", ("x",), True)
    items: list[list[Span]] = [["one\nmore"], ["two", "para"], [code], []]
    out = layout_list(items, ["1. ", "2. ", "3. ", "4. "])
    assert [flatten(s) for s in out] == [
        "1. one\n   more\n2. two\n   para\n3.",
        "<pre>x</pre>",
        "4.",
    ]


def test_utf16_len() -> None:
    assert utf16_len("aé") == 2
    assert utf16_len("🎉") == 2
    assert utf16_len("👨‍👩‍👧") == 8


# ---------------------------------------------------------------------- splitter

HTML_TAG = re.compile(r"<(/?)([a-z]+)[^>]*>")


def balanced(chunk: str) -> bool:
    stack: list[str] = []
    for m in HTML_TAG.finditer(chunk):
        if m[1]:
            if not stack or stack.pop() != m[2]:
                return False
        else:
            stack.append(m[2])
    return not stack


def visible(chunk: str) -> int:
    return len(HTML_TAG.sub("", chunk))


def squash(text: str) -> str:
    return "".join(text.split())


def test_split_packs_blocks_with_separator() -> None:
    assert split_chunks(["aaa", "bbb", "ccc"], 8) == ["aaa\n\nbbb", "ccc"]
    assert split_chunks(["aaa", "bbb", "ccc"], 100, sep="\n") == ["aaa\nbbb\nccc"]


def test_split_prefers_block_boundaries() -> None:
    # "bbbb bbbb" would fit after "aa" only if cut inside; it moves to the next chunk whole.
    assert split_chunks(["aa", "bbbb bbbb"], 10) == ["aa", "bbbb bbbb"]


def test_split_drops_empty_blocks_and_chunks() -> None:
    assert split_chunks(["", "  ", "\n"], 10) == []
    assert split_chunks(["a", "", "b"], 10) == ["a\n\nb"]


def test_split_prefers_lines_then_words() -> None:
    block = "one two three\nfour five six seven"
    assert split_chunks([block], 20) == ["one two three", "four five six seven"]
    assert split_chunks(["one two three four five"], 10) == ["one two", "three four", "five"]


def test_split_early_newline_loses_to_later_space() -> None:
    block = "a\n" + "word " * 10
    chunks = split_chunks([block], 20)
    assert chunks[0].startswith("a\nword word")
    assert all(len(c) <= 20 for c in chunks)
    assert squash("".join(chunks)) == squash(block)


def test_split_hard_cuts_long_words() -> None:
    assert split_chunks(["x" * 25], 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_split_never_cuts_atomic_units() -> None:
    atomic = re.compile(r"&\w+;")
    text = "&amp;" * 5  # 25 characters with no space
    chunks = split_chunks([text], 12, atomic=atomic)
    assert chunks == ["&amp;&amp;", "&amp;&amp;", "&amp;"]


def test_split_closes_and_reopens_wraps() -> None:
    block = group(["start ", Wrap("<b>", "</b>", ("one two three four five six",)), " end"])
    chunks = split_chunks([block], 20, visible)
    assert all(balanced(c) for c in chunks), chunks
    assert all(visible(c) <= 20 for c in chunks)
    assert chunks == ["start <b>one two three</b>", "<b>four five six</b> end"]
    assert chunks[1].startswith("<b>")
    assert squash(HTML_TAG.sub("", "".join(chunks))) == squash(
        "start one two three four five six end"
    )


def test_split_counts_markup_with_len() -> None:
    block = Wrap("**", "**", ("aaaa bbbb cccc",))
    chunks = split_chunks([block], 10)
    assert chunks == ["**aaaa**", "**bbbb**", "**cccc**"]


def test_split_does_not_leave_empty_elements() -> None:
    block = group(["aaaaaaaa", Wrap("<i>", "</i>", ("bbbbbbbb",))])
    chunks = split_chunks([block], 9, visible)
    assert "<i></i>" not in "".join(chunks)
    assert all(balanced(c) for c in chunks)
    assert squash(HTML_TAG.sub("", "".join(chunks))) == "aaaaaaaabbbbbbbb"


def test_split_code_block_by_lines() -> None:
    lines = [f"    line {i} = {i * 2}" for i in range(30)]
    code = Wrap("```py\n", "\n```", ("\n".join(lines),), True)
    chunks = split_chunks([code], 100)
    assert len(chunks) > 1
    body_lines: list[str] = []
    for c in chunks:
        assert len(c) <= 100
        assert c.startswith("```py\n") and c.endswith("\n```")
        assert c.count("```") == 2
        body_lines += c[len("```py\n") : -len("\n```")].split("\n")
    assert body_lines == lines  # indentation and every line kept, cut only at line ends


def test_split_overlong_code_line_is_hard_split_keeping_spaces() -> None:
    line = "a b " * 30  # 120 characters, with spaces that must survive
    code = Wrap("<pre>", "</pre>", (line,), True)
    chunks = split_chunks([code], 50, visible)
    assert [visible(c) for c in chunks] == [50, 50, 20]
    assert "".join(HTML_TAG.sub("", c) for c in chunks) == line


def test_split_uses_measure() -> None:
    emoji = "🎉" * 10  # 10 characters, 20 UTF-16 units
    assert split_chunks([emoji], 10, utf16_len) == ["🎉" * 5, "🎉" * 5]
    assert split_chunks([emoji], 10) == [emoji]


def test_split_keeps_emoji_sequences_whole() -> None:
    family = "👨‍👩‍👧"  # 5 code points, 8 UTF-16 units
    chunks = split_chunks([family * 3], 10, utf16_len)
    assert chunks == [family, family, family]


def test_split_rest_of_long_block_shares_chunk_with_next_block() -> None:
    chunks = split_chunks(["x" * 15, "yy"], 10)
    assert chunks == ["x" * 10, "xxxxx\n\nyy"]


def test_split_is_lossless_on_large_input() -> None:
    words = ["alpha", "&amp;", "beta", "👨‍👩‍👧", "gamma\n", "delta"]
    text = " ".join(words[i % len(words)] for i in range(3000))
    bold = Wrap("<b>", "</b>", (text[:5000],))
    blocks = [group([bold, text[5000:]]), Wrap("<pre>", "</pre>", (text,), True)]
    chunks = split_chunks(blocks, 700, visible, atomic=re.compile(r"&\w+;"))
    for c in chunks:
        assert visible(c) <= 700
        assert balanced(c)
        assert not re.search(r"&\w*$|^\w*;", HTML_TAG.sub("", c))  # entity never cut
    assert squash(HTML_TAG.sub("", "".join(chunks))) == squash(text + text)
