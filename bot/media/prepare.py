"""One message's files, as the model gets them (`Media.prepare`).

Before a message's run, each downloaded file becomes blocks for the model and
a line for the stored history: a photo shrunk and turned upright (an image
block), a PDF as a document block (or its text), an office document as
Markdown, a text file as it is, a voice message as its transcript. A
document's text past `[media] document_max_chars` is stored whole for its
sender (`ResultStore.keep`) and read on with `get_tool_result`. A file that
cannot be used is a problem the user is told about; one that claims a format
it does not have is a note to the model. The message as a whole is refused
when it carries more files or bytes than `[media] max_files` / `max_bytes`,
and fails (kept in the inbox for an operator) when the transcription service
does not answer.

Decoding and converting is CPU-bound and runs on a worker thread, one file at
a time; nothing here holds a database connection while it works.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.config.media import MediaSettings
from bot.llm.types import Block, DocumentBlock, ImageBlock, TextBlock
from bot.media import audio
from bot.media.errors import TranscriptionFailed, Unreadable
from bot.media.kinds import Handling, handling
from bot.media.pdf import NATIVE_MAX_BYTES, NATIVE_MAX_PAGES, read_pdf
from bot.media.transcription import Transcriber
from bot.metrics import Metrics
from bot.tools.results import ResultStore
from bot.types import Attachment, IncomingMessage

if TYPE_CHECKING:
    from bot.media.images import Picture

log = logging.getLogger("switchboard.media")

VOICE_BYTES_PER_SECOND = 2000
"""A voice message of unknown length is taken as this many bytes a second
(16 kbit/s, what voice notes use at most): an upper bound of its length."""
NO_TRANSCRIPTION = "I can't listen to voice messages yet (no transcription service is set up)"
_LABELS: dict[Handling, str] = {
    "docx": "Word document",
    "xlsx": "spreadsheet",
    "pptx": "presentation",
    "html": "web page",
    "csv": "table",
    "tsv": "table",
    "epub": "e-book",
    "text": "text file",
    "pdf": "PDF",
}


@dataclass(frozen=True, slots=True)
class Part:
    """What one file became."""

    blocks: tuple[Block, ...] = ()
    """What the model gets (a transcript is added by `bot.agent.content`)."""
    note: str = ""
    """Its line in the stored history."""
    problem: str | None = None
    """Why it could not be used, for the user."""
    transcript: str | None = None
    heading: str = ""
    """What the note says before the transcript ("[Voice message …, transcribed]")."""
    seconds: float = 0.0
    """Audio transcribed."""
    chars: int = 0
    """Characters of document text read."""


@dataclass(frozen=True, slots=True)
class Prepared:
    parts: tuple[Part, ...] = ()
    """One per attachment, in order."""
    refusal: str | None = None
    """The message is refused as a whole (too many files, too many bytes)."""
    failure: str | None = None
    """The transcription service failed: the message is kept for an operator."""

    @property
    def audio_seconds(self) -> float:
        return sum(part.seconds for part in self.parts)

    @property
    def document_chars(self) -> int:
        return sum(part.chars for part in self.parts)

    @property
    def transcripts(self) -> tuple[str, ...]:
        return tuple(p.transcript for p in self.parts if p.transcript)

    def retold(self, transcripts: Sequence[str]) -> Prepared:
        """The same, its `transcripts` replaced in order (as the input guard
        passed them: notes added, NUL characters removed)."""
        told = iter(transcripts)
        parts = []
        for part in self.parts:
            if part.transcript:
                text = next(told)
                part = dataclasses.replace(part, transcript=text, note=f"{part.heading}: {text}")
            parts.append(part)
        return dataclasses.replace(self, parts=tuple(parts))


@dataclass(frozen=True, slots=True)
class Sender:
    """Whose files they are and where: for documents stored by reference."""

    conversation_id: int
    user_id: int
    run_id: str | None = None


@dataclass
class Media:
    settings: MediaSettings
    results: ResultStore | None = None
    """Where long documents are kept (None: they are cut, not kept)."""
    transcriber: Transcriber | None = None
    ffprobe: str | None = None
    metrics: Metrics = field(default_factory=Metrics)

    async def prepare(self, msg: IncomingMessage, sender: Sender) -> Prepared:
        attachments = msg.attachments
        if not attachments:
            return Prepared()
        if refusal := self._over_limits(attachments):
            return Prepared(refusal=refusal)
        parts: list[Part] = []
        for attachment in attachments:
            try:
                part = await self._part(attachment, sender)
            except TranscriptionFailed as exc:
                self.metrics.media_file("audio", "failed")
                log.warning("transcription.failed file=%s: %s", attachment.file_id, exc)
                return Prepared(failure=str(exc))
            parts.append(part)
        return Prepared(tuple(parts))

    def _over_limits(self, attachments: Sequence[Attachment]) -> str | None:
        settings = self.settings
        if len(attachments) > settings.max_files:
            return (
                f"That message has {len(attachments)} files; I take up to "
                f"{settings.max_files} in one message. Send them in smaller groups."
            )
        total = sum(len(a.data) for a in attachments if a.data is not None)
        if total > settings.max_bytes:
            return (
                f"Those files come to {_size(total)} together; I take up to "
                f"{_size(settings.max_bytes)} in one message. Send them in smaller groups."
            )
        return None

    async def _part(self, attachment: Attachment, sender: Sender) -> Part:
        if attachment.problem:
            return Part(problem=attachment.problem)
        if attachment.data is None:
            return Part(problem="it was not downloaded")
        kind = handling(attachment)
        label = attachment.name or attachment.kind
        if kind == "image":
            part = await self._image(attachment.data, label)
        elif kind == "audio":
            part = await self._voice(attachment, attachment.data, label)
        elif kind == "pdf":
            part = await self._pdf(attachment.data, label, sender)
        elif kind == "other":
            mime = attachment.mime_type or "unknown"
            part = Part(problem=f"unsupported file type {mime} ({ACCEPTED})")
        else:
            part = await self._document(kind, attachment.data, label, sender)
        outcome = "ok" if part.blocks or part.transcript is not None else "unreadable"
        if part.problem:
            outcome = "problem"
        self.metrics.media_file(kind, outcome)
        return part

    # -- images ---------------------------------------------------------------

    async def _image(self, data: bytes, label: str) -> Part:
        try:
            picture = await asyncio.to_thread(_picture, data, self.settings.image_max_px)
        except Unreadable as exc:
            return Part(note=f"[Attachment {label}: the file could not be read as an image: {exc}]")
        size = f"{picture.source[0]}×{picture.source[1]}"
        if (picture.width, picture.height) != picture.source:
            size += f", shrunk to {picture.width}×{picture.height}"
        if picture.frames > 1:
            size += f", the first of {picture.frames} frames"
        block = ImageBlock(
            picture.media_type,
            base64.b64encode(picture.data).decode("ascii"),
            picture.width,
            picture.height,
        )
        return Part((block,), f"[Image: {label}, {size}]")

    # -- documents --------------------------------------------------------------

    async def _pdf(self, data: bytes, label: str, sender: Sender) -> Part:
        try:
            pdf = await asyncio.to_thread(read_pdf, data)
        except Unreadable as exc:
            return Part(problem=str(exc))
        pages = f"{pdf.pages} page{'s' if pdf.pages != 1 else ''}"
        native = pdf.pages <= NATIVE_MAX_PAGES and len(data) <= NATIVE_MAX_BYTES
        if not pdf.text.strip() and not native:
            return Part(problem=f"it has no text to read ({pages}, scanned pages?)")
        lead = ""
        if not native:
            limit = f"the {NATIVE_MAX_PAGES} pages" if pdf.pages > NATIVE_MAX_PAGES else "the size"
            lead = f"{pages}, more than {limit} the model reads as a document: its text follows"
        text, stored = await self._capped(pdf.text, label, sender, lead=lead)
        note = f"[PDF: {label}, {pages}, {len(pdf.text):,} characters{stored}]"
        if not native:
            return Part((TextBlock(text),), note, chars=len(pdf.text))
        encoded = base64.b64encode(data).decode("ascii")
        document = DocumentBlock(
            "application/pdf", encoded, label, pdf.pages, text, chars=len(pdf.text)
        )
        return Part((document,), note, chars=len(pdf.text))

    async def _document(self, kind: Handling, data: bytes, label: str, sender: Sender) -> Part:
        if kind == "text":
            content = data.decode("utf-8", errors="replace")
        else:
            try:
                content = await asyncio.to_thread(_markdown, kind, data)
            except Unreadable as exc:
                return Part(problem=str(exc))
        if not content.strip():
            return Part(note=f"[Attachment {label}: the {_LABELS.get(kind, 'document')} is empty]")
        text, stored = await self._capped(content, label, sender)
        what = _LABELS.get(kind, "document").capitalize()
        note = f"[{what}: {label}, {len(content):,} characters{stored}]"
        return Part((TextBlock(text),), note, chars=len(content))

    async def _capped(
        self, content: str, label: str, sender: Sender, *, lead: str = ""
    ) -> tuple[str, str]:
        """The document wrapped for the model, cut at `document_max_chars` with
        the whole kept by reference; and the history note's mention of it."""
        intro = f"[{label}: {lead}]\n" if lead else ""
        cap = self.settings.document_max_chars
        if len(content) <= cap:
            return f'{intro}<document name="{label}">\n{content}\n</document>', ""
        tail = (
            f"[{label}: only the first {cap:,} of {len(content):,} characters are shown; "
            "the rest could not be kept.]"
        )
        stored = ""
        if self.results is not None:
            try:
                ref, tail = await self.results.keep(
                    content,
                    name=label,
                    conversation_id=sender.conversation_id,
                    user_id=sender.user_id,
                    run_id=sender.run_id,
                    shown=cap,
                )
                stored = f"; stored as {ref}"
            except Exception:
                log.exception("document.not_stored file=%s chars=%d", label, len(content))
        body = content[:cap]
        return f'{intro}<document name="{label}">\n{body}\n</document>\n{tail}', stored

    # -- voice ------------------------------------------------------------------

    async def _voice(self, attachment: Attachment, data: bytes, label: str) -> Part:
        if self.transcriber is None:
            return Part(problem=NO_TRANSCRIPTION)
        limit = self.transcriber.settings.max_seconds
        seconds = await self._seconds(attachment, data)
        if seconds > limit:
            return Part(
                problem=(
                    f"it is {audio.clock(seconds)} long; I transcribe voice messages of up to "
                    f"{audio.clock(limit)}"
                )
            )
        mime = (attachment.mime_type or "audio/ogg").split(";", 1)[0].strip()
        text = await self.transcriber.transcribe(data, _filename(attachment, mime), mime)
        self.metrics.transcribed(seconds)
        log.info("transcription.done file=%s seconds=%.1f chars=%d", label, seconds, len(text))
        if not text:
            note = f"[Voice message {label}, {audio.clock(seconds)}: no words could be made out]"
            return Part(note=note, seconds=seconds)
        heading = f"[Voice message {label}, {audio.clock(seconds)}, transcribed]"
        return Part(note=f"{heading}: {text}", transcript=text, heading=heading, seconds=seconds)

    async def _seconds(self, attachment: Attachment, data: bytes) -> float:
        if attachment.seconds:
            return attachment.seconds
        found = await asyncio.to_thread(audio.container_seconds, data)
        if found is None and self.ffprobe is not None:
            found = await audio.probe_seconds(self.ffprobe, data)
        if found is None:
            log.info("media.audio_length_estimated file=%s bytes=%d", attachment.file_id, len(data))
            found = len(data) / VOICE_BYTES_PER_SECOND
        return found


def _picture(data: bytes, max_px: int) -> Picture:
    from bot.media.images import prepare_image  # Pillow and its plugins: when first needed

    return prepare_image(data, max_px)


def _markdown(kind: str, data: bytes) -> str:
    from bot.media.documents import to_markdown  # the office libraries: when first needed

    return to_markdown(kind, data)


ACCEPTED = "I read images, PDFs, office documents, text files and voice messages"


def _filename(attachment: Attachment, mime: str) -> str:
    """A name whose extension tells the service the container (OpenAI looks)."""
    name = attachment.name or "voice"
    if "." in name:
        return name
    extension = {"audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a", "audio/webm": "webm"}
    return f"{name}.{extension.get(mime, 'ogg')}"


def _size(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    return f"{size / 1024:.0f} KB"
