"""Canonical Markdown, parsed once, plus the splitting helpers every renderer shares.

The agent answers in CommonMark + GFM strikethrough and tables. `parse()` turns that
into a small typed tree (frozen dataclasses); each adapter walks the tree and builds
*spans* in its own syntax, then `split_chunks()` packs them into messages.

A span is either a `str` (output text, already escaped for the platform) or a `Wrap`:
an element with opening and closing markup around children (`<b>`/`</b>`, `**`/`**`,
a code fence). When a message must be cut inside a `Wrap`, the splitter closes it at
the end of one chunk and reopens it at the start of the next, so every chunk is
balanced on its own. A `verbatim` wrap (code) is cut only at line ends, and only by
hard-splitting an overlong line, never at spaces.
"""

from bot.formatting.nodes import (
    Block,
    BlockQuote,
    Break,
    Cell,
    CodeBlock,
    CodeSpan,
    Heading,
    HorizontalRule,
    Image,
    Inline,
    Link,
    ListBlock,
    Paragraph,
    Style,
    Styled,
    Table,
    Text,
)
from bot.formatting.parse import (
    format_table,
    parse,
    plain_text,
)
from bot.formatting.spans import (
    Span,
    Wrap,
    flatten,
    group,
    is_verbatim,
    layout_list,
    merge_runs,
    prefix_lines,
    utf16_len,
)
from bot.formatting.split import (
    split_chunks,
)

__all__ = [
    "Block",
    "BlockQuote",
    "Break",
    "Cell",
    "CodeBlock",
    "CodeSpan",
    "Heading",
    "HorizontalRule",
    "Image",
    "Inline",
    "Link",
    "ListBlock",
    "Paragraph",
    "Span",
    "Style",
    "Styled",
    "Table",
    "Text",
    "Wrap",
    "flatten",
    "format_table",
    "group",
    "is_verbatim",
    "layout_list",
    "merge_runs",
    "parse",
    "plain_text",
    "prefix_lines",
    "split_chunks",
    "utf16_len",
]
