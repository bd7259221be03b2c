"""An MCP tool result as the model gets it (`ToolOutput`).

Text content is the text; an image becomes an image the model sees (JPEG,
PNG, GIF or WebP up to `MAX_IMAGE_BYTES`) and a line naming it in the text,
which is all the stored history keeps of it; structured content is added as
JSON unless the text already is that JSON; audio, resource links and binary
resources are named, not passed on. A result flagged `isError` is a failure:
its text goes to the error channel, as data (`ToolReportedError`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from bot.errors import ToolReportedError
from bot.llm.types import ImageBlock
from bot.ports import ToolOutput

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""The model's API limit for one image."""
MAX_IMAGES = 8
NO_OUTPUT = "(the tool returned nothing)"


def to_output(result: CallToolResult) -> ToolOutput:
    """The result for the model; raises `ToolReportedError` with the server's text
    when the result is flagged `isError`."""
    parts: list[str] = []
    images: list[ImageBlock] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(_image(block, images))
        elif isinstance(block, AudioContent):
            parts.append(f"[Audio ({block.mime_type}) left out: audio is not passed on]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[Resource: {block.name} <{block.uri}>]")
        elif isinstance(block, EmbeddedResource):
            parts.append(_resource(block))
    structured = _structured(result.structured_content, parts)
    if structured:
        parts.append(structured)
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        raise ToolReportedError(text.strip() or "the tool reported an error without saying what")
    return ToolOutput(text if text.strip() else NO_OUTPUT, tuple(images))


def _image(block: ImageContent, images: list[ImageBlock]) -> str:
    try:
        size = len(base64.b64decode(block.data, validate=True))
    except (binascii.Error, ValueError):
        return f"[Image ({block.mime_type}) left out: its data is not base64]"
    label = f"{block.mime_type}, {_kb(size)}"
    if block.mime_type not in IMAGE_TYPES:
        return f"[Image ({label}) left out: only JPEG, PNG, GIF and WebP are passed on]"
    if size > MAX_IMAGE_BYTES:
        return f"[Image ({label}) left out: larger than {_kb(MAX_IMAGE_BYTES)}]"
    if len(images) >= MAX_IMAGES:
        return f"[Image ({label}) left out: at most {MAX_IMAGES} images a result]"
    images.append(ImageBlock(block.mime_type, block.data))
    return f"[Image {len(images)}: {label}]"


def _resource(block: EmbeddedResource) -> str:
    resource = block.resource
    if isinstance(resource, TextResourceContents):
        return f"[Resource {resource.uri}]\n{resource.text}"
    kind = resource.mime_type or "binary"
    return f"[Resource {resource.uri} ({kind}) left out: binary content is not passed on]"


def _structured(value: Any, texts: list[str]) -> str:
    """The structured content as JSON, unless a text part already is it."""
    if value is None:
        return ""
    for text in texts:
        try:
            if json.loads(text) == value:
                return ""
        except (TypeError, ValueError):
            continue
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _kb(size: int) -> str:
    return f"{size / 1024:,.0f} KB" if size >= 1024 else f"{size} bytes"
