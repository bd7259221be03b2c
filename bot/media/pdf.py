"""A PDF's pages and text (pypdf), for the model.

The model gets a PDF as a document block (the provider reads its pages
itself) when the provider takes documents and the PDF is within the API's
limits (`NATIVE_MAX_PAGES`, `NATIVE_MAX_BYTES`); otherwise its text, read
here. A PDF encrypted with a password (not only with an owner's permissions)
or broken is `Unreadable`. CPU-bound: the caller runs it in a thread.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field

import pypdf
from pypdf.errors import PyPdfError

from bot.media.errors import Unreadable

log = logging.getLogger("switchboard.media")

NATIVE_MAX_PAGES = 100
"""The most pages the Messages API reads from one PDF."""
NATIVE_MAX_BYTES = 20 * 1024 * 1024
"""The largest PDF sent as a document: its base64 (4/3 larger, under 27 MB)
leaves room under the API's 32 MB request limit for the rest. Several PDFs
in one request are held to the request's limits by `bot.llm.capabilities`."""
MAX_TEXT_PAGES = 2000
"""Text is read from at most this many pages; the rest are named as left out."""


@dataclass(frozen=True, slots=True)
class PdfText:
    pages: int
    text: str = field(repr=False)
    title: str | None = None


def read_pdf(data: bytes) -> PdfText:
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opened(reader):
            raise Unreadable("it is password-protected")
        count = len(reader.pages)
        parts: list[str] = []
        for number, page in enumerate(reader.pages, 1):
            if number > MAX_TEXT_PAGES:
                parts.append(f"[… {count - MAX_TEXT_PAGES:,} more pages not read]")
                break
            text = (page.extract_text() or "").strip()
            parts.append(f"--- page {number} ---\n{text}" if text else f"--- page {number} ---")
        title = reader.metadata.title if reader.metadata is not None else None
    except Unreadable:
        raise
    except (PyPdfError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.info("media.pdf_unreadable error=%s", type(exc).__name__)
        raise Unreadable("it is not a PDF that could be read") from None
    return PdfText(count, "\n\n".join(parts), str(title) if title else None)


def _opened(reader: pypdf.PdfReader) -> bool:
    """An encrypted PDF with an empty user password (permissions only) opens."""
    try:
        return bool(reader.decrypt(""))
    except (PyPdfError, NotImplementedError, ValueError):
        return False
