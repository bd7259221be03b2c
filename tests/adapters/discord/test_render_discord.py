"""adapters.discord.render: Markdown → Discord Markdown chunks."""

from __future__ import annotations

import re

import pytest

from adapters.discord.render import LIMIT, render
from tests.long_reply import make_reply, squash

ZWSP = "\u200b"

CASES: list[tuple[str, str, str]] = [
    ("plain", "hello", "hello"),
    ("bold", "**b**", "**b**"),
    ("italic", "*i* and _j_", "*i* and *j*"),
    ("strike", "~~s~~", "~~s~~"),
    ("spoiler", "||secret||", "||secret||"),
    ("nested", "**a *b***", "**a *b***"),
    ("code span", "`a<b> && *c*`", "`a<b> && *c*`"),
    ("code span with backtick", "`` a`b ``", "``a`b``"),
    ("code span starting with backtick", "`` `a ``", "`` `a ``"),
    ("html stays literal", "<b>hi</b> & <i>", "<b>hi</b> & <i>"),
    (
        "specials escaped",
        r"2 \* 3, snake_case, a|b, \[x\], ~t~, \`q\`, a\\b",
        r"2 \* 3, snake\_case, a\|b, \[x\], \~t\~, \`q\`, a\\b",
    ),
    ("literal spoiler marks", r"a \|\|b\|\|", r"a \|\|b\|\|"),
    (
        "bare url unescaped",
        "see https://x.org/a_b*c|d now_ok",
        r"see https://x.org/a_b*c|d now\_ok",
    ),
    ("line start heading", r"\# not a heading", r"\# not a heading"),
    ("line start quote", r"\> not a quote", r"\> not a quote"),
    ("line start list", "\\- not a list\n\\+ nor this", "\\- not a list\n\\+ nor this"),
    ("line start subtext", r"\-# small", r"\-# small"),
    ("line start number", r"1\. not a list", r"1\. not a list"),
    ("mid-line untouched", "a # b > c - d 1. e", "a # b > c - d 1. e"),
    ("after soft break", "a\n\\# b", "a\n\\# b"),
    ("link", "[the *site*](https://e.com/?a=1&b=2)", "[the *site*](https://e.com/?a=1&b=2)"),
    (
        "link parens encoded",
        "[w](https://en.wikipedia.org/wiki/A_(b))",
        "[w](https://en.wikipedia.org/wiki/A_%28b%29)",
    ),
    ("link text escaped", r"[a\_b \[1\]](http://x.y)", r"[a\_b \[1\]](http://x.y)"),
    ("autolink", "<https://x.org/a_b>", "https://x.org/a_b"),
    ("relative link", "[docs](/a_b)", r"docs (/a\_b)"),
    ("mailto is not masked", "[me](mailto:me@x.org)", "me (mailto:me@x.org)"),
    ("image", "![a cat](http://i/c.png)", "[a cat](http://i/c.png)"),
    ("image in link", "[![c_t](http://i/c.png)](http://x.y)", r"[c\_t](http://x.y)"),
    ("heading 1", "# Title *x*", "# Title *x*"),
    ("heading 3", "### T", "### T"),
    ("heading 4 is bold", "#### T", "**T**"),
    ("heading text escaped", "## a_b", r"## a\_b"),
    ("paragraphs", "a\n\nb", "a\n\nb"),
    ("bullets", "* a\n* b", "- a\n- b"),
    ("ordered", "3. a\n4. b", "3. a\n4. b"),
    ("nested list", "- a\n  - b\n- c", "- a\n  - b\n- c"),
    ("quote", "> q *i*\n> r", "> q *i*\n> r"),
    ("nested quote is flattened", "> a\n>\n> > b", "> a\n> b"),
    ("code block", "```python\nx = a_b * 2  # <x>\n```", "```python\nx = a_b * 2  # <x>\n```"),
    ("code block odd lang", "```{x}\nok\n```", "```\nok\n```"),
    ("fence inside code", "````\n```\n````", "```\n``\u200b`\n```"),
    ("code not in quote", "> a\n>\n> ```\n> x\n> ```", "> a\n\n```\nx\n```"),
    ("table", "| a | b |\n|---|--:|\n| 1 | 22 |", "```\na |  b\n--+---\n1 | 22\n```"),
    ("hr", "a\n\n---", "a\n\n———"),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_render(markdown: str, expected: str) -> None:
    assert render(markdown) == [expected]


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n"])
def test_empty(markdown: str) -> None:
    assert render(markdown) == []


MENTIONS: list[tuple[str, str, str]] = [
    ("everyone and here", "@everyone @here", f"@{ZWSP}everyone @{ZWSP}here"),
    ("users and roles", "<@123> <@!123> <@&456>", f"<@{ZWSP}123> <@{ZWSP}!123> <@{ZWSP}&456>"),
    ("other words untouched", "@everyones @bob a@b.c <#123>", "@everyones @bob a@b.c <#123>"),
    ("in bold", "**@everyone**", f"**@{ZWSP}everyone**"),
    ("in code span", "`@here <@1>`", f"`@{ZWSP}here <@{ZWSP}1>`"),
    ("in code block", "```\n@everyone\n```", f"```\n@{ZWSP}everyone\n```"),
    ("in link text", "[@here](http://x.y)", f"[@{ZWSP}here](http://x.y)"),
    (
        "in table",
        "| @everyone |\n|---|\n| <@&1> |",
        f"```\n@{ZWSP}everyone\n---------\n<@{ZWSP}&1>\n```",
    ),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in MENTIONS], ids=[c[0] for c in MENTIONS]
)
def test_mentions_never_ping(markdown: str, expected: str) -> None:
    (chunk,) = render(markdown)
    assert chunk == expected
    assert not re.search(r"@(everyone|here)\b|<@[!&]?\d", chunk)


def test_deterministic() -> None:
    reply, _, _ = make_reply(WORDS)
    assert render(reply) == render(reply)


# -------------------------------------------------------------- a long reply

WORDS = ("a_b", "<@123>", "@everyone")


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text.replace("@" + ZWSP, "@"))


FENCE = re.compile(r"```(\w*)\n(.*?)\n```", re.S)


def test_long_reply() -> None:
    reply, expected, codes = make_reply(WORDS)
    assert len(reply) > 10_000
    chunks = render(reply)
    assert len(chunks) >= 6
    for chunk in chunks:
        assert 0 < len(chunk) <= LIMIT
        assert chunk.count("```") % 2 == 0, chunk  # fences balanced
        assert chunk.count("**") % 2 == 0, chunk  # bold closed in every chunk
        assert not re.search(r"@(everyone|here)\b|<@[!&]?\d", chunk)
        assert not chunk.endswith("\\")  # an escape is never cut from its character
    bodies = [m[1].replace("@" + ZWSP, "@") for c in chunks for m in FENCE.findall(c)]
    assert len(bodies) > len(codes)  # the long code block became several fences
    assert "\n".join(bodies) == "\n".join(codes)  # split at line ends, nothing lost
    langs = [m[0] for c in chunks for m in FENCE.findall(c)]
    assert langs.count("python") == 1 and langs.count("js") == 1
    prose = "".join(FENCE.sub("", c) for c in chunks).replace("**", "")
    code_text = "".join(codes)
    assert squash(unescape(prose)) + squash(code_text) != ""
    visible = "".join(FENCE.sub(lambda m: m[2], c).replace("**", "") for c in chunks)
    assert squash(unescape(visible)) == squash(unescape(expected).replace("\\", ""))


def test_long_italic_is_reopened() -> None:
    chunks = render("*" + " ".join(["word"] * 600) + "*")
    assert len(chunks) == 2
    assert all(re.fullmatch(r"\*[a-z ]+\*", c) for c in chunks)
    assert all(len(c) <= LIMIT for c in chunks)
