"""Files people send, made here (Pillow, python-docx, openpyxl, python-pptx, a
PDF written by hand, an Ogg Opus container written with mutagen's page
writer): nothing is downloaded."""

from __future__ import annotations

import io
import random
import struct
import zipfile
import zlib
from functools import cache

import docx
import openpyxl
import pillow_heif
import pptx
from mutagen.ogg import OggPage
from PIL import Image

pillow_heif.register_heif_opener()

BLUE = (0, 0, 255)
RED = (220, 20, 20)


def photo(
    width: int = 4000, height: int = 3000, *, orientation: int = 1, noise: bool = True
) -> bytes:
    """A phone photo: red, with a blue band along its top edge as stored (so an
    applied rotation can be seen), noisy enough to weigh megabytes, and the
    EXIF orientation tag."""
    image = Image.new("RGB", (width, height), RED)
    if noise:
        rng = random.Random(57)
        grain = Image.frombytes("L", (width // 4, height // 4), rng.randbytes(width * height // 16))
        image.paste(Image.merge("RGB", (grain, grain, grain)).resize((width, height)), (0, 0))
        image = Image.blend(image, Image.new("RGB", (width, height), RED), 0.6)
    image.paste(BLUE, (0, 0, width, height // 10))
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "Phone Maker"
    out = io.BytesIO()
    image.save(out, "JPEG", quality=95, exif=exif.tobytes())
    return out.getvalue()


def animated_gif(frames: int = 3) -> bytes:
    colours = [RED, BLUE, (0, 200, 0), (200, 200, 0)]
    images = [Image.new("RGB", (64, 48), colours[i % len(colours)]) for i in range(frames)]
    out = io.BytesIO()
    images[0].save(out, "GIF", save_all=True, append_images=images[1:], duration=100, loop=0)
    return out.getvalue()


def encoded(
    fmt: str, size: tuple[int, int] = (300, 200), colour: tuple[int, int, int] = BLUE
) -> bytes:
    """A plain image in `fmt` ("HEIF", "TIFF", "BMP", "AVIF", "PNG", …)."""
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, fmt)
    return out.getvalue()


@cache
def bomb(side: int = 20_000) -> bytes:
    """A small PNG of 400 million black pixels (1 bit each): past Pillow's
    limit, refused unopened. Written chunk by chunk, its rows compressed as a
    stream (Pillow would fill and encode a 50 MB image first, seconds of CPU
    at collection in every test process)."""
    row = bytes(1 + (side + 7) // 8)  # filter type 0, then the row's bits
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # 1-bit greyscale
    chunks = _chunk(b"IHDR", header) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


# -- PDF -----------------------------------------------------------------------


def pdf(pages: int, text: str = "Page {n} of the report.", *, lines: int = 1) -> bytes:
    """A PDF of `pages` pages, each with `lines` lines of `text` (Helvetica),
    written object by object with its cross-reference table."""
    objects: list[bytes] = []
    page_ids = [3 + 2 * i for i in range(pages)]
    font_id = 3 + 2 * pages
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = b" ".join(b"%d 0 R" % pid for pid in page_ids)
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages))
    for number in range(1, pages + 1):
        content_id = page_ids[number - 1] + 1
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (font_id, content_id)
        )
        body = b"BT /F1 11 Tf 72 740 Td 14 TL "
        for line in range(lines):
            words = text.format(n=number, line=line + 1).encode("latin-1")
            words = words.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
            body += b"(%s) '" % words
        body += b" ET"
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(body), body))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def encrypted_pdf(password: str = "s3cret") -> bytes:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=io.BytesIO(pdf(1)))
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# -- office documents -------------------------------------------------------------


def word_with_table() -> bytes:
    document = docx.Document()
    document.add_heading("Quarterly figures", level=1)
    document.add_paragraph("The numbers for the board.")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate(
        [["Region", "Q1", "Q2"], ["North", "120", "135"], ["South", "98", "101"]]
    ):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("Ship it", style="List Bullet")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def workbook_with_two_sheets() -> bytes:
    book = openpyxl.Workbook()
    first = book.active
    first.title = "Sales"
    for row in [["Product", "Units"], ["Widget", 40], ["Gadget", 12]]:
        first.append(row)
    second = book.create_sheet("Staff")
    for row in [["Name", "Team"], ["Ada", "Core"], ["Linus", "Kernel"]]:
        second.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def deck() -> bytes:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Roadmap"
    slide.placeholders[1].text = "Ship voice notes"
    slide.notes_slide.notes_text_frame.text = "Mention the beta."
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def epub(chapters: list[str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as book:
        book.writestr("mimetype", "application/epub+zip")
        book.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        items = "".join(
            f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
            for i in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{i}"/>' for i in reversed(range(len(chapters))))
        book.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for i, text in enumerate(chapters):
            book.writestr(
                f"OEBPS/c{i}.xhtml",
                f"<html><body><h1>Chapter {i}</h1><p>{text}</p></body></html>",
            )
    return out.getvalue()


# -- audio -----------------------------------------------------------------------


def ogg_opus(seconds: float, serial: int = 7) -> bytes:
    """An Ogg Opus container (OpusHead, OpusTags, one audio page whose granule
    position says `seconds`): what Telegram and Discord voice messages are."""
    head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 6) + b"switch" + struct.pack("<I", 0)
    audio = b"\xfc" + bytes(range(40))
    out = b""
    for sequence, (packet, position) in enumerate(
        [(head, 0), (tags, 0), (audio, 312 + int(seconds * 48000))]
    ):
        page = OggPage()
        page.serial, page.sequence, page.position = serial, sequence, position
        page.packets = [packet]
        page.first, page.last = sequence == 0, sequence == 2
        out += page.write()
    return out
