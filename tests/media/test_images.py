"""Photos as the model gets them: upright, at most `image_max_px` on the long
edge, under the API's per-image limit, without metadata; and what is not an
image, or too large to open, is `Unreadable`, never a crash."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from bot.llm.tokens import image_tokens, raw_image_tokens
from bot.media.errors import Unreadable
from bot.media.images import API_MAX_BASE64, prepare_image
from tests.media import samples


def _blue(pixel: tuple[int, ...]) -> bool:
    r, g, b = pixel[:3]
    return b > 200 and r < 60 and g < 60


def test_a_4000_pixel_phone_photo_is_turned_upright_and_shrunk_under_the_limit() -> None:
    original = samples.photo(4000, 3000, orientation=6)  # stored landscape, shown portrait
    assert len(original) > 3_000_000
    picture = prepare_image(original, 1568)

    assert picture.source == (3000, 4000)
    assert (picture.width, picture.height) == (1176, 1568)
    assert picture.media_type == "image/jpeg"
    assert len(base64.b64encode(picture.data)) < API_MAX_BASE64
    copy = Image.open(io.BytesIO(picture.data))
    assert copy.size == (1176, 1568)
    assert 0x0112 not in copy.getexif() and 0x010F not in copy.getexif()  # no tags left
    # Orientation 6: turned 90° clockwise, so the band along the stored top edge
    # is now down the right-hand side.
    assert _blue(copy.getpixel((copy.width - 5, copy.height // 2)))
    assert not _blue(copy.getpixel((5, copy.height // 2)))
    assert not _blue(copy.getpixel((copy.width // 2, 5)))


def test_a_small_image_keeps_its_size() -> None:
    picture = prepare_image(samples.encoded("PNG", (640, 480)), 1568)
    assert (picture.width, picture.height) == (640, 480) and picture.source == (640, 480)


def test_an_animated_gif_becomes_its_first_frame() -> None:
    picture = prepare_image(samples.animated_gif(3), 1568)
    assert picture.frames == 3 and picture.source_format == "GIF"
    first = Image.open(io.BytesIO(picture.data)).convert("RGB")
    assert first.getpixel((10, 10))[0] > 180  # the first frame is red, not blue or green


@pytest.mark.parametrize("fmt", ["HEIF", "TIFF", "BMP", "AVIF"])
def test_other_formats_are_converted(fmt: str) -> None:
    picture = prepare_image(samples.encoded(fmt), 1568)
    assert picture.media_type in ("image/jpeg", "image/png")
    assert (picture.width, picture.height) == (300, 200)
    pixel = Image.open(io.BytesIO(picture.data)).convert("RGB").getpixel((150, 100))
    assert _blue(pixel)


def test_transparency_is_kept_as_png() -> None:
    out = io.BytesIO()
    Image.new("RGBA", (100, 100), (0, 0, 255, 80)).save(out, "PNG")
    picture = prepare_image(out.getvalue(), 1568)
    assert picture.media_type == "image/png"
    assert Image.open(io.BytesIO(picture.data)).mode == "RGBA"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"These are my holiday notes, not a photo.\n", "not an image that could be read"),
        (samples.photo(400, 300, noise=False)[:700], "not an image that could be read"),
        (samples.bomb(), "too many pixels"),
    ],
    ids=["text named .jpg", "cut short", "decompression bomb"],
)
def test_what_is_not_an_image_is_unreadable(data: bytes, reason: str) -> None:
    with pytest.raises(Unreadable, match=reason):
        prepare_image(data, 1568)


def test_the_token_figure_for_the_note() -> None:
    """What a 4,000 × 3,000 photo costs (the API's (w × h) / 750): as sent
    before resizing, and at 1568 px on the long edge."""
    before = raw_image_tokens(4000, 3000)
    after = raw_image_tokens(1568, 1176)
    assert (before, after) == (16_000, 2_459)
    assert image_tokens(4000, 3000) == image_tokens(1568, 1176) == 1600  # the API's own cap
