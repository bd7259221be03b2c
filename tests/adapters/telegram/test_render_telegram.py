"""adapters.telegram.render: Markdown → Telegram HTML chunks."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

from adapters.telegram.render import ALLOWED_TAGS, LIMIT, render, to_plain_text, visible_len
from tests.long_reply import make_reply, squash

CASES: list[tuple[str, str, str]] = [
    ("plain", "hello", "hello"),
    ("bold", "**b**", "<b>b</b>"),
    ("italic", "*i* and _j_", "<i>i</i> and <i>j</i>"),
    ("strike", "~~s~~", "<s>s</s>"),
    ("spoiler", "||secret||", "<tg-spoiler>secret</tg-spoiler>"),
    ("nested", "**a *b***", "<b>a <i>b</i></b>"),
    ("code span escaped", "`a<b> && c`", "<code>a&lt;b&gt; &amp;&amp; c</code>"),
    ("code inside bold is plain", "**x `y`**", "<b>x y</b>"),
    ("text escaped", "1 < 2 && 3 > 2", "1 &lt; 2 &amp;&amp; 3 &gt; 2"),
    (
        "raw html escaped",
        "<b>hi</b> <script>x</script>",
        "&lt;b&gt;hi&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;",
    ),
    ("entity in source", "&lt;b&gt; &amp;", "&lt;b&gt; &amp;"),
    (
        "link",
        "[a <b>](https://e.com/?a=1&b=2)",
        '<a href="https://e.com/?a=1&amp;b=2">a &lt;b&gt;</a>',
    ),
    ("link quote encoded", '[q](https://e.com/"x")', '<a href="https://e.com/%22x%22">q</a>'),
    ("link with formatting", "[**b**](http://x.y)", '<a href="http://x.y"><b>b</b></a>'),
    ("autolink", "<https://x.org>", '<a href="https://x.org">https://x.org</a>'),
    ("relative link", "[docs](/a&b)", "docs (/a&amp;b)"),
    ("image", "![a cat](http://i/c.png)", '<a href="http://i/c.png">a cat</a>'),
    ("image in link", "[![cat](http://i/c.png)](http://x.y)", '<a href="http://x.y">cat</a>'),
    ("code in link is plain", "[`x`](http://x.y)", '<a href="http://x.y">x</a>'),
    ("image without alt", "![](http://i/c.png)", '<a href="http://i/c.png">image</a>'),
    ("heading", "# Title & *more*", "<b>Title &amp; <i>more</i></b>"),
    ("paragraphs", "a\n\nb", "a\n\nb"),
    ("soft break", "a\nb", "a\nb"),
    ("bullets", "- a\n- b", "• a\n• b"),
    ("ordered", "3. a\n4. b", "3. a\n4. b"),
    ("nested list", "- a\n  - b\n    - c\n- d", "• a\n  ◦ b\n    ▪ c\n• d"),
    ("item continuation", "- a\n\n  more", "• a\n  more"),
    ("quote", "> q *i*\n> r", "<blockquote>q <i>i</i>\nr</blockquote>"),
    ("nested quote is flattened", "> a\n>\n> > b", "<blockquote>a\n\nb</blockquote>"),
    ("code block", "```\nx < 1\n```", "<pre>x &lt; 1</pre>"),
    (
        "code block lang",
        "```python\nif a<b: pass\n```",
        '<pre><code class="language-python">if a&lt;b: pass</code></pre>',
    ),
    ("code block odd lang", '```"><x\nok\n```', "<pre>ok</pre>"),
    (
        "code keeps indentation",
        "```\ndef f():\n    return 1\n```",
        "<pre>def f():\n    return 1</pre>",
    ),
    (
        "code not in quote",
        "> a\n>\n> ```\n> x\n> ```",
        "<blockquote>a</blockquote>\n\n<pre>x</pre>",
    ),
    ("code in list", "- a\n\n  ```\n  x\n  ```\n- b", "• a\n\n<pre>x</pre>\n\n• b"),
    ("table", "| a | b |\n|---|--:|\n| 1 | 22 |", "<pre>a |  b\n--+---\n1 | 22</pre>"),
    ("table escaped", "| <x> |\n|---|\n| & |", "<pre>&lt;x&gt;\n---\n&amp;</pre>"),
    ("hr", "a\n\n---\n\nb", "a\n\n———\n\nb"),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_render(markdown: str, expected: str) -> None:
    assert render(markdown) == [expected]
    assert_valid(expected)


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n"])
def test_empty(markdown: str) -> None:
    assert render(markdown) == []


def test_to_plain_text() -> None:
    chunk = '<b>a &amp; b</b> <a href="https://x?a=1&amp;b">&lt;l&gt;</a> <pre>x &quot;</pre>'
    assert to_plain_text(chunk) == 'a & b <l> x "'


def test_visible_len_counts_utf16_text_only() -> None:
    assert visible_len("<b>a&amp;b</b>") == 3
    assert visible_len('<a href="http://long.example/">x</a>') == 1
    assert visible_len("👨‍👩‍👧🎉") == 10


def test_deterministic() -> None:
    reply, _, _ = make_reply(WORDS)
    assert render(reply) == render(reply)


# ------------------------------------------------------------------- validation


class TagChecker(HTMLParser):
    """Telegram's rules: only allowed tags, balanced, attributes only where allowed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            self.errors.append(f"tag {tag}")
        names = [name for name, _ in attrs]
        allowed = {"a": ["href"], "code": ["class"]}.get(tag, [])
        if any(name not in allowed for name in names) or (tag == "a" and names != ["href"]):
            self.errors.append(f"attrs {tag} {attrs}")
        if tag == "code" and attrs and self.stack[-1:] != ["pre"]:
            self.errors.append("code class outside pre")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")


ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#\d+);")


def assert_valid(chunk: str) -> None:
    checker = TagChecker()
    checker.feed(chunk)
    checker.close()
    assert not checker.errors, (checker.errors, chunk)
    assert not checker.stack, (checker.stack, chunk)
    text = re.sub(r"<[^<>]*>", "", chunk)
    assert "<" not in text and ">" not in text, chunk
    assert "&" not in ENTITY.sub("", text), chunk  # every & starts a known entity


# -------------------------------------------------------------- a long reply

WORDS = ("tea&cake", "<tag>", "beta")


def test_long_reply() -> None:
    reply, expected, codes = make_reply(WORDS)
    assert len(reply) > 10_000
    chunks = render(reply)
    assert len(chunks) >= 4
    for chunk in chunks:
        assert 0 < visible_len(chunk) <= LIMIT
        assert_valid(chunk)
    assert squash("".join(to_plain_text(c) for c in chunks)) == squash(expected)
    # code blocks: split only at line ends, every piece its own <pre>, nothing lost
    pre = [
        html.unescape(m)
        for c in chunks
        for m in re.findall(r"<pre>(?:<code[^>]*>)?(.*?)(?:</code>)?</pre>", c, re.S)
    ]
    assert len(pre) > len(codes)
    assert "\n".join(pre) == "\n".join(codes)
    # the long bold run is closed and reopened around the cut
    bold_chunks = [c for c in chunks if "<b>" in c]
    assert len(bold_chunks) >= 2


def test_chunk_limit_counts_utf16_units() -> None:
    reply = " ".join(["👨‍👩‍👧"] * 1000)  # 8 units per family, 9,000 units in all
    chunks = render(reply)
    assert len(chunks) == 3
    assert all(visible_len(c) <= LIMIT for c in chunks)
    assert all(len(c) < LIMIT for c in chunks)  # Python counts code points, fewer
    assert squash("".join(chunks)) == squash(reply)


def test_long_word_of_entities_is_not_cut_inside_an_entity() -> None:
    chunks = render("&" * 9000)
    assert len(chunks) == 3
    for chunk in chunks:
        assert re.fullmatch(r"(?:&amp;)+", chunk)
        assert visible_len(chunk) <= LIMIT
