"""The user's turn as LLM content: text, images (as image blocks), text
documents (inline), and notes for files the assistant cannot use."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from bot.llm.types import Block, ImageBlock, TextBlock
from bot.types import Attachment, IncomingMessage

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-sh",
        "application/javascript",
        "application/sql",
    }
)
MAX_DOCUMENT_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class UserContent:
    blocks: tuple[Block, ...]
    """What the LLM receives."""
    text: str
    """What is stored in the history (no file bytes: images become a note)."""
    problems: tuple[str, ...]
    """Files that could not be used, in words for the user."""
    usable: bool
    """Whether there is anything to answer (text, or a file the assistant can read)."""


def user_content(msg: IncomingMessage) -> UserContent:
    text = msg.text
    if msg.chat_type == "group" and msg.source == "user" and text:
        name = msg.user_display_name or msg.platform_user_id
        text = f"[{name}] {text}"
    blocks: list[Block] = [TextBlock(text)] if text.strip() else []
    notes: list[str] = []
    problems: list[str] = []
    used = bool(text.strip())
    for attachment in msg.attachments:
        label = attachment.name or attachment.kind
        problem = attachment.problem or _unusable(attachment)
        if problem:
            problems.append(f"{label}: {problem}")
            notes.append(f"[Attachment {label} could not be used: {problem}]")
        elif attachment.mime_type in IMAGE_TYPES and attachment.data is not None:
            blocks.append(
                ImageBlock(attachment.mime_type, base64.b64encode(attachment.data).decode())
            )
            notes.append(f"[Image: {label}]")
            used = True
        else:
            assert attachment.data is not None
            document = attachment.data.decode("utf-8", errors="replace")
            cut = len(document) > MAX_DOCUMENT_CHARS
            body = document[:MAX_DOCUMENT_CHARS]
            more = f"\n[… truncated: {len(document):,} characters in all]" if cut else ""
            blocks.append(TextBlock(f'<document name="{label}">\n{body}{more}\n</document>'))
            notes.append(f"[Document: {label}, {len(document):,} characters]")
            used = True
    if notes:
        blocks.append(TextBlock("\n".join(notes)))
    stored = "\n\n".join(part for part in (text, "\n".join(notes)) if part)
    return UserContent(tuple(blocks), stored, tuple(problems), used)


def _unusable(attachment: Attachment) -> str | None:
    if attachment.data is None:
        return "it was not downloaded"
    mime = attachment.mime_type or ""
    if mime in IMAGE_TYPES:
        return None
    if attachment.kind == "image":
        return f"unsupported image type {mime or 'unknown'} (use JPEG, PNG, GIF or WebP)"
    if mime.startswith("text/") or mime in TEXT_TYPES or _looks_like_text(attachment.data):
        return None
    return f"unsupported file type {mime or 'unknown'} (images and text files only)"


def _looks_like_text(data: bytes) -> bool:
    sample = data[:4096]
    if b"\x00" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > len(sample) - 4  # a character cut by the sample's end
    return True
