"""What a fetched page says, as text for the model.

HTML → the page's main text as Markdown, its title and links kept
(trafilatura: navigation, ads, scripts and footers are left out); `text/*`,
JSON and XML as they are; PDF → its text (pypdf); anything else is refused
by its content type before its body is read (`kind_of`). CPU-bound work:
the caller runs `extract` in a thread.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Literal

import pypdf
import trafilatura

from bot.errors import ToolFailed
from bot.tools.web.guard import Refused

log = logging.getLogger("switchboard.web")

Kind = Literal["html", "text", "pdf"]

MAX_PDF_PAGES = 200
_HTML = frozenset({"text/html", "application/xhtml+xml"})
_TEXT = frozenset({"application/json", "application/xml", "application/javascript"})


def kind_of(content_type: str, head: bytes = b"") -> Kind | None:
    """How a body of `content_type` is read; None: not at all. Without a
    content type, the body's first bytes decide (`head`)."""
    if not content_type:
        return _sniffed(head)
    if content_type in _HTML:
        return "html"
    if content_type == "application/pdf":
        return "pdf"
    if content_type.startswith("text/") or content_type in _TEXT:
        return "text"
    if content_type.endswith(("+json", "+xml")):
        return "text"
    return None


def _sniffed(head: bytes) -> Kind | None:
    start = head.lstrip()[:512].lower()
    if start.startswith(b"%pdf-"):
        return "pdf"
    if start.startswith((b"<!doctype html", b"<html")) or b"<body" in start:
        return "html"
    try:
        head[:4096].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head[:4096]) - 4:  # not a character cut at the end
            return None
    return "text"


@dataclass(frozen=True, slots=True)
class Extracted:
    title: str | None
    text: str


def extract(kind: Kind, body: bytes, *, url: str, charset: str | None, cut: bool) -> Extracted:
    """The text of `body`. `cut`: the body is only the start of the page."""
    if kind == "pdf":
        if cut:
            raise Refused(
                "too_large", "the PDF is larger than the size cap (a PDF cut short is unreadable)"
            )
        return _pdf(body)
    if kind == "html":
        return _html(body, url, charset)
    return Extracted(None, _decoded(body, charset))


def _decoded(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _html(body: bytes, url: str, charset: str | None) -> Extracted:
    document: str | bytes = _decoded(body, charset) if charset else body
    tree = trafilatura.load_html(document)
    if tree is None:
        raise ToolFailed("the page's HTML could not be read")
    metadata = trafilatura.extract_metadata(tree, default_url=url, extensive=False)
    title = metadata.title if metadata is not None else None
    text = trafilatura.extract(
        tree,
        url=url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_comments=False,
        include_images=False,
        with_metadata=False,
        deduplicate=False,
    )
    if not text:  # no main text found (a short or unusual page): all its text
        text = trafilatura.html2txt(document) or ""
    return Extracted(title or None, text.strip())


def _pdf(body: bytes) -> Extracted:
    try:
        reader = pypdf.PdfReader(io.BytesIO(body))
        if reader.is_encrypted:
            raise ToolFailed("the PDF is encrypted")
        title = reader.metadata.title if reader.metadata is not None else None
        pages = []
        for number, page in enumerate(reader.pages, 1):
            if number > MAX_PDF_PAGES:
                pages.append(f"[… {len(reader.pages) - MAX_PDF_PAGES} more pages not read]")
                break
            pages.append(page.extract_text() or "")
    except pypdf.errors.PyPdfError as exc:
        raise ToolFailed(f"the PDF could not be read ({type(exc).__name__})") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    return Extracted(str(title) if title else None, text)
