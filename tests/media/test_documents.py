"""Documents as Markdown, PDFs as pages and text; broken, encrypted and
old-format files are `Unreadable` with a reason a person understands."""

from __future__ import annotations

import io
import zipfile

import pytest

from bot.media.documents import MAX_UNZIPPED, to_markdown
from bot.media.errors import Unreadable
from bot.media.kinds import handling
from bot.media.pdf import read_pdf
from bot.types import Attachment
from tests.media import samples


def test_a_word_document_keeps_its_heading_table_and_list() -> None:
    text = to_markdown("docx", samples.word_with_table())
    assert "## Quarterly figures" in text
    assert "| Region | Q1 | Q2 |\n| --- | --- | --- |\n| North | 120 | 135 |" in text
    assert text.index("The numbers") < text.index("| Region") < text.index("- Ship it")


def test_each_sheet_of_a_workbook_is_a_table() -> None:
    text = to_markdown("xlsx", samples.workbook_with_two_sheets())
    assert "## Sheet: Sales\n\n| Product | Units |\n| --- | --- |\n| Widget | 40 |" in text
    assert "## Sheet: Staff\n\n| Name | Team |\n| --- | --- |\n| Ada | Core |" in text


def test_slides_with_their_notes() -> None:
    text = to_markdown("pptx", samples.deck())
    assert "## Slide 1" in text and "Roadmap" in text and "Notes: Mention the beta." in text


def test_csv_html_and_epub() -> None:
    assert to_markdown("csv", b"a,b\n1,2\n") == "| a | b |\n| --- | --- |\n| 1 | 2 |"
    page = (
        b"<html><body><article><h1>Otters</h1><p>"
        + b"Otters swim. " * 30
        + b"</p></article></body></html>"
    )
    assert "Otters swim." in to_markdown("html", page)
    book = to_markdown("epub", samples.epub(["first words", "second words"]))
    assert book.index("second words") < book.index("first words")  # the spine's order


@pytest.mark.parametrize("kind", ["docx", "xlsx", "pptx", "epub"])
def test_a_broken_file_is_unreadable(kind: str) -> None:
    with pytest.raises(Unreadable, match="could be read"):
        to_markdown(kind, b"PK\x03\x04 this is not really a zip file")


def test_an_encrypted_or_old_office_file_says_so() -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600
    with pytest.raises(Unreadable, match="password-protected, or in the old binary"):
        to_markdown("docx", ole)


def test_a_zip_bomb_is_not_opened() -> None:
    out = io.BytesIO()  # streamed in, fast deflate: 256 MB of zeros at once cost seconds
    megabyte = bytes(1024 * 1024)
    with (
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
        archive.open("word/document.xml", "w") as entry,
    ):
        for _ in range(MAX_UNZIPPED // len(megabyte)):
            entry.write(megabyte)
        entry.write(b"\x00")  # one byte past the limit
    with pytest.raises(Unreadable, match="unpacks to more than"):
        to_markdown("docx", out.getvalue())


def test_pdf_pages_and_text() -> None:
    found = read_pdf(samples.pdf(3))
    assert found.pages == 3
    assert "--- page 2 ---\nPage 2 of the report." in found.text


def test_a_password_protected_pdf_and_a_broken_one() -> None:
    with pytest.raises(Unreadable, match="password-protected"):
        read_pdf(samples.encrypted_pdf())
    with pytest.raises(Unreadable, match="not a PDF that could be read"):
        read_pdf(b"%PDF-1.4\nnothing else")


@pytest.mark.parametrize(
    ("attachment", "expected"),
    [
        (Attachment("image", "1", "photo.jpg", "image/jpeg"), "image"),
        (Attachment("document", "2", "notes.jpg", None, data=b"plain words"), "image"),
        (Attachment("document", "3", "report.pdf", "application/octet-stream"), "pdf"),
        (Attachment("document", "4", "x", None, data=b"%PDF-1.7 ..."), "pdf"),
        (Attachment("document", "5", "q.xlsx", "application/zip"), "xlsx"),
        (Attachment("document", "6", "data.csv", "text/plain"), "csv"),
        (Attachment("document", "7", "a.md", "text/markdown"), "text"),
        (Attachment("audio", "8", "voice.ogg", "audio/ogg"), "audio"),
        (Attachment("document", "9", "blob.bin", None, data=b"\x00\x01"), "other"),
        (Attachment("video", "10", "clip.mp4", "video/mp4"), "other"),
    ],
)
def test_how_a_file_is_read(attachment: Attachment, expected: str) -> None:
    assert handling(attachment) == expected
