"""Office and other documents as Markdown, for the model.

Word (DOCX: headings, paragraphs, lists and tables in order), Excel (XLSX:
each sheet a table), PowerPoint (PPTX: each slide's text, tables and notes),
HTML (its main text, trafilatura), CSV/TSV (a table) and EPUB (its chapters in
reading order). One library per format, each small and well kept, rather
than one converter that brings a machine-learning runtime with it. A file
that is encrypted, of the old binary formats (DOC, XLS, PPT) or broken is
`Unreadable`. CPU-bound: the caller runs it in a thread.
"""

from __future__ import annotations

import csv
import io
import logging
import posixpath
import zipfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from xml.etree import ElementTree

import docx
import openpyxl
import pptx
import trafilatura
from docx.table import Table as DocxTable
from docx.text.paragraph import Paragraph

from bot.media.errors import Unreadable

log = logging.getLogger("switchboard.media")

MAX_ROWS = 2000
"""Rows read from one sheet or CSV file; the rest are counted, not read."""
MAX_COLUMNS = 50
MAX_UNZIPPED = 256 * 1024 * 1024
"""DOCX, XLSX, PPTX and EPUB are zip files: one that would unpack to more is
refused before it is opened (a zip bomb)."""
_ZIPPED = frozenset({"docx", "xlsx", "pptx", "epub"})
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
"""Compound files: the old binary Office formats, and encrypted new ones."""


def to_markdown(kind: str, data: bytes) -> str:
    """The document of `kind` ("docx", "xlsx", "pptx", "html", "csv", "tsv",
    "epub") in `data`, as Markdown."""
    if kind in ("docx", "xlsx", "pptx") and data.startswith(_OLE):
        raise Unreadable(
            "it is password-protected, or in the old binary Office format (save it as "
            f".{kind} and send it again)"
        )
    reader = _READERS[kind]
    try:
        if kind in _ZIPPED:
            _check_zip(data, kind)
        return reader(data).strip()
    except Unreadable:
        raise
    except Exception as exc:  # each library has its own errors; none is worth a crash
        log.info("media.document_unreadable kind=%s error=%s", kind, type(exc).__name__)
        raise Unreadable(f"it is not a {kind.upper()} file that could be read") from None


def _check_zip(data: bytes, kind: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        raise Unreadable(f"it is not a {kind.upper()} file that could be read") from None
    if unpacked > MAX_UNZIPPED:
        raise Unreadable(f"it unpacks to more than {MAX_UNZIPPED // (1024 * 1024)} MB")


# -- Word ----------------------------------------------------------------------


def _docx(data: bytes) -> str:
    document = docx.Document(io.BytesIO(data))
    out: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            out.append(_paragraph(item))
        elif isinstance(item, DocxTable):
            out.append(_table([[cell.text for cell in row.cells] for row in item.rows]))
    return "\n\n".join(part for part in out if part)


def _paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text.strip()
    if not text:
        return ""
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if style == "Title":
        return f"# {text}"
    if style.startswith("Heading"):
        level = style.removeprefix("Heading").strip()
        depth = int(level) if level.isdigit() else 1
        return f"{'#' * min(depth + 1, 6)} {text}"
    if style.startswith("List Number"):
        return f"1. {text}"
    if style.startswith("List"):
        return f"- {text}"
    return text


# -- Excel ---------------------------------------------------------------------


def _xlsx(data: bytes) -> str:
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        out: list[str] = []
        for sheet in book.worksheets:
            rows: list[list[str]] = []
            extra = 0
            for values in sheet.iter_rows(values_only=True):
                cells = [_cell(v) for v in values[:MAX_COLUMNS]]
                if not any(cells):
                    continue
                if len(rows) >= MAX_ROWS:
                    extra += 1
                    continue
                rows.append(cells)
            body = _table(rows) if rows else "(empty)"
            more = f"\n\n[… {extra:,} more rows not read]" if extra else ""
            out.append(f"## Sheet: {sheet.title}\n\n{body}{more}")
        return "\n\n".join(out)
    finally:
        book.close()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- PowerPoint ----------------------------------------------------------------


def _pptx(data: bytes) -> str:
    deck = pptx.Presentation(io.BytesIO(data))
    out: list[str] = []
    for number, slide in enumerate(deck.slides, 1):
        parts = [f"## Slide {number}"]
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                parts.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                table = shape.table
                parts.append(_table([[cell.text for cell in row.cells] for row in table.rows]))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                parts.append(f"Notes: {notes.text.strip()}")
        out.append("\n\n".join(parts))
    return "\n\n".join(out)


# -- HTML, CSV, EPUB -------------------------------------------------------------


def _html(data: bytes) -> str:
    tree = trafilatura.load_html(data)
    if tree is None:
        raise Unreadable("it is not an HTML page that could be read")
    text = trafilatura.extract(
        tree, output_format="markdown", include_tables=True, include_links=True
    )
    return text or trafilatura.html2txt(data) or ""


def _delimited(delimiter: str) -> Callable[[bytes], str]:
    def read(data: bytes) -> str:
        text = data.decode("utf-8-sig", errors="replace")
        rows: list[list[str]] = []
        extra = 0
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            if not any(cell.strip() for cell in row):
                continue
            if len(rows) >= MAX_ROWS:
                extra += 1
                continue
            rows.append(row[:MAX_COLUMNS])
        more = f"\n\n[… {extra:,} more rows not read]" if extra else ""
        return (_table(rows) if rows else "") + more

    return read


_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def _epub(data: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        container = ElementTree.fromstring(book.read("META-INF/container.xml"))
        rootfile = container.find(f".//{_CONTAINER}rootfile")
        if rootfile is None:
            raise Unreadable("it is not an EPUB book that could be read")
        opf_path = rootfile.attrib["full-path"]
        opf = ElementTree.fromstring(book.read(opf_path))
        base = posixpath.dirname(opf_path)
        items = {
            item.attrib["id"]: item.attrib["href"]
            for item in opf.iter(f"{_OPF}item")
            if "id" in item.attrib and "href" in item.attrib
        }
        chapters: list[str] = []
        for ref in opf.iter(f"{_OPF}itemref"):
            href = items.get(ref.attrib.get("idref", ""))
            if href is None:
                continue
            page = book.read(posixpath.normpath(posixpath.join(base, href)))
            text = trafilatura.html2txt(page) or ""
            if text.strip():
                chapters.append(text.strip())
    return "\n\n---\n\n".join(chapters)


# -- Markdown tables -------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = [_row(rows[0], width), "| " + " | ".join("---" for _ in range(width)) + " |"]
    lines.extend(_row(row, width) for row in rows[1:])
    return "\n".join(lines)


def _row(cells: Iterable[str], width: int) -> str:
    values = [" ".join(str(c).split()).replace("|", "\\|") for c in cells]
    values += [""] * (width - len(values))
    return "| " + " | ".join(values) + " |"


_READERS: dict[str, Callable[[bytes], str]] = {
    "docx": _docx,
    "xlsx": _xlsx,
    "pptx": _pptx,
    "html": _html,
    "csv": _delimited(","),
    "tsv": _delimited("\t"),
    "epub": _epub,
}
KINDS = frozenset(_READERS)
