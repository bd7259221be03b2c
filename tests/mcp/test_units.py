"""The pieces of an MCP tool that need no server: its name, whether its schema
can be sent, and how a result becomes what the model reads."""

from __future__ import annotations

import base64

import pytest
from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from bot.errors import ToolFailed
from bot.mcp.content import to_output
from bot.mcp.names import MAX_NAME, schema_problem, tool_name


def test_names_are_clean_short_and_unique() -> None:
    assert tool_name("tickets", "create_ticket") == "mcp__tickets__create_ticket"
    assert tool_name("git.hub", "search issues/prs") == "mcp__git_hub__search_issues_prs"
    long = tool_name("server", "x" * 100)
    assert len(long) == MAX_NAME and long.startswith("mcp__server__xxx")
    assert long != tool_name("server", "x" * 99)  # cut, but the hash keeps them apart
    taken = {"mcp__s__a_b"}
    assert tool_name("s", "a.b", taken) == "mcp__s__a_b_2"


def test_schemas_that_cannot_be_sent() -> None:
    assert schema_problem({"type": "object", "properties": {"q": {"type": "string"}}}) is None
    assert "not an object schema" in str(schema_problem({"type": "array"}))
    assert "not valid JSON Schema" in str(
        schema_problem({"type": "object", "properties": {"q": {"type": 7}}})
    )
    big = {"type": "object", "properties": {f"f{i}": {"description": "x" * 90} for i in range(90)}}
    assert "bytes (at most 8,192)" in str(schema_problem(big))


def test_text_images_structured_content_and_the_rest() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    output = to_output(
        CallToolResult(
            content=[
                TextContent(text="two results"),
                ImageContent(data=png, mime_type="image/png"),
                ImageContent(data=png, mime_type="image/bmp"),
                AudioContent(data=png, mime_type="audio/wav"),
                ResourceLink(name="spec", uri="https://example.com/spec"),
                EmbeddedResource(
                    resource=TextResourceContents(uri="file:///notes.txt", text="the notes")
                ),
            ],
            structured_content={"count": 2},
        )
    )
    assert output.text.splitlines() == [
        "two results",
        "[Image 1: image/png, 9 bytes]",
        "[Image (image/bmp, 9 bytes) left out: only JPEG, PNG, GIF and WebP are passed on]",
        "[Audio (audio/wav) left out: audio is not passed on]",
        "[Resource: spec <https://example.com/spec>]",
        "[Resource file:///notes.txt]",
        "the notes",
        '{"count": 2}',
    ]
    (image,) = output.images
    assert (image.media_type, image.data_b64) == ("image/png", png)


def test_structured_content_already_in_the_text_is_not_repeated() -> None:
    result = CallToolResult(
        content=[TextContent(text='{"count": 2}')], structured_content={"count": 2}
    )
    assert to_output(result).text == '{"count": 2}'
    assert to_output(CallToolResult(content=[])).text == "(the tool returned nothing)"


def test_an_error_result_fails_with_the_servers_text() -> None:
    result = CallToolResult(content=[TextContent(text="no such project")], is_error=True)
    with pytest.raises(ToolFailed, match="no such project"):
        to_output(result)
