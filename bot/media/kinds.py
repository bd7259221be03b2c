"""What a file is, for what the model gets of it: by its type as the platform
said it, its name's extension and, where those say nothing useful, its first
bytes. A file named `.jpg` that is text is still treated as an image (and
found unreadable as one): the name is what the sender claimed."""

from __future__ import annotations

import posixpath
from typing import Literal

from bot.types import Attachment

Handling = Literal[
    "image", "pdf", "docx", "xlsx", "pptx", "html", "csv", "tsv", "epub", "text", "audio", "other"
]

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
_BY_TYPE: dict[str, Handling] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/msword": "docx",  # found unreadable: the old binary format
    "application/vnd.ms-excel": "xlsx",
    "application/vnd.ms-powerpoint": "pptx",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/csv": "csv",
    "text/tab-separated-values": "tsv",
    "application/epub+zip": "epub",
}
_BY_EXTENSION: dict[str, Handling] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".doc": "docx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".xls": "xlsx",
    ".pptx": "pptx",
    ".ppt": "pptx",
    ".html": "html",
    ".htm": "html",
    ".csv": "csv",
    ".tsv": "tsv",
    ".epub": "epub",
    ".jpg": "image",
    ".jpeg": "image",
    ".png": "image",
    ".gif": "image",
    ".webp": "image",
    ".heic": "image",
    ".heif": "image",
    ".avif": "image",
    ".tif": "image",
    ".tiff": "image",
    ".bmp": "image",
    ".ogg": "audio",
    ".oga": "audio",
    ".opus": "audio",
    ".mp3": "audio",
    ".m4a": "audio",
    ".wav": "audio",
    ".flac": "audio",
    ".webm": "audio",
}
_VAGUE = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/zip"})


def handling(attachment: Attachment) -> Handling:
    mime = (attachment.mime_type or "").split(";", 1)[0].strip().lower()
    extension = posixpath.splitext((attachment.name or "").lower())[1]
    if attachment.kind == "audio" or mime.startswith("audio/"):
        return "audio"
    if attachment.kind == "image" or mime.startswith("image/"):
        return "image"
    if mime in _BY_TYPE:
        return _BY_TYPE[mime]
    if mime in _VAGUE or mime.startswith("text/") or mime in TEXT_TYPES:
        if extension in _BY_EXTENSION:
            return _BY_EXTENSION[extension]
        if mime not in _VAGUE:
            return "text"
        return _sniffed(attachment.data or b"")
    if attachment.kind == "video" or mime.startswith("video/"):
        return "other"
    return _BY_EXTENSION.get(extension) or _sniffed(attachment.data or b"")


def _sniffed(data: bytes) -> Handling:
    head = data[:16]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM")) or (
        head[:4] == b"RIFF" and head[8:12] == b"WEBP"
    ):
        return "image"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"mif1", b"avif", b"msf1"):
        return "image"
    if head.startswith(b"OggS") or head.startswith(b"ID3"):
        return "audio"
    return "text" if looks_like_text(data) else "other"


def looks_like_text(data: bytes) -> bool:
    sample = data[:4096]
    if b"\x00" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > len(sample) - 4  # a character cut by the sample's end
    return True
