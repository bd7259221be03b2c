"""The user's turn as LLM content: the text, then what each file became
(`bot.media.Prepared`: image and document blocks, Markdown, a transcript),
and notes for files the assistant cannot use."""

from __future__ import annotations

from dataclasses import dataclass

from bot.llm.types import Block, TextBlock
from bot.media import Part, Prepared
from bot.types import Attachment, IncomingMessage


@dataclass(frozen=True, slots=True)
class UserContent:
    blocks: tuple[Block, ...]
    """What the LLM receives."""
    text: str
    """What is stored in the history (no file bytes: files become a note; a
    transcript is kept whole)."""
    problems: tuple[str, ...]
    """Files that could not be used, in words for the user."""
    usable: bool
    """Whether there is anything to answer (text, or a file the assistant can read)."""


def user_content(msg: IncomingMessage, prepared: Prepared | None = None) -> UserContent:
    """`prepared`: what `bot.media.Media.prepare` made of the message's files;
    None for a message whose files were not read (group chatter kept as
    context): each is then only named."""
    text = msg.text
    group = msg.chat_type == "group" and msg.source == "user"
    name = msg.user_display_name or msg.platform_user_id
    if group and text:
        text = f"[{name}] {text}"
    said: list[Block] = [TextBlock(text)] if text.strip() else []
    files: list[Block] = []
    notes: list[str] = []  # for the model, after the files
    stored: list[str] = []  # for the history
    problems: list[str] = []
    parts = prepared.parts if prepared is not None else ()
    if len(parts) != len(msg.attachments):
        parts = tuple(_unread(a) for a in msg.attachments)
    for attachment, part in zip(msg.attachments, parts, strict=True):
        label = attachment.name or attachment.kind
        if part.problem:
            problems.append(f"{label}: {part.problem}")
            note = f"[Attachment {label} could not be used: {part.problem}]"
            notes.append(note)
            stored.append(note)
        elif part.transcript is not None:  # the words are the message's text
            said.append(TextBlock(f"[{name}] {part.note}" if group else part.note))
            stored.append(part.note)
        else:
            files.extend(part.blocks)
            if part.note:
                notes.append(part.note)
                stored.append(part.note)
    usable = bool(said or files) or any(p.note and not p.problem for p in parts)
    blocks = [*said, *files]
    if notes:
        blocks.append(TextBlock("\n".join(notes)))
    history = "\n\n".join(p for p in (text, "\n".join(stored)) if p)
    return UserContent(tuple(blocks), history, tuple(problems), usable)


def _unread(attachment: Attachment) -> Part:
    if attachment.problem:
        return Part(problem=attachment.problem)
    if attachment.data is None:
        return Part(problem="it was not downloaded")
    return Part(note=f"[Attachment: {attachment.name or attachment.kind}]")
