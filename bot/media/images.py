"""A photo as the model gets it: decoded with Pillow, turned upright, shrunk
and re-encoded under the API's limits.

The long edge is cut to `max_px`; the EXIF orientation is applied to the
pixels (the copy keeps no metadata: no rotation tag, no location); an
animation becomes its first frame; HEIC/HEIF (pillow-heif), AVIF, TIFF, BMP
and the rest Pillow reads become JPEG, or PNG where they have transparency.
The result stays under the API's per-image limit (5 MB of base64), quality or
size stepping down if needed. Anything Pillow cannot read, or an image past
Pillow's pixel limit (a decompression bomb), is `Unreadable`. CPU-bound: the
caller runs it in a thread.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass, field

import pillow_heif
from PIL import Image, ImageOps, UnidentifiedImageError

from bot.media.errors import Unreadable

log = logging.getLogger("switchboard.media")

pillow_heif.register_heif_opener()

API_MAX_BASE64 = 5 * 1024 * 1024
"""The API's limit on one image, as base64."""
MAX_ENCODED = API_MAX_BASE64 * 3 // 4
"""Bytes whose base64 stays within `API_MAX_BASE64`."""
_JPEG_QUALITIES = (85, 75, 60)
_DECODE_ERRORS = (
    UnidentifiedImageError,
    Image.DecompressionBombError,
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    MemoryError,
)


@dataclass(frozen=True, slots=True)
class Picture:
    media_type: str
    data: bytes = field(repr=False)
    width: int
    height: int
    source: tuple[int, int]
    """The original's size, upright."""
    source_format: str
    frames: int = 1


def prepare_image(data: bytes, max_px: int) -> Picture:
    """The model's copy of the image in `data`; `Unreadable` if it is none."""
    try:
        image = Image.open(io.BytesIO(data))
        return _prepared(image, max_px)
    except Unreadable:
        raise
    except Image.DecompressionBombError:
        raise Unreadable("it has too many pixels to open safely") from None
    except _DECODE_ERRORS as exc:
        log.info("media.image_unreadable error=%s", type(exc).__name__)
        raise Unreadable("it is not an image that could be read") from None


def _prepared(image: Image.Image, max_px: int) -> Picture:
    source_format = image.format or "unknown"
    width, height = image.size
    if width * height > (Image.MAX_IMAGE_PIXELS or 0) > 0:
        raise Unreadable("it has too many pixels to open safely")
    frames = int(getattr(image, "n_frames", 1) or 1)
    if frames > 1:
        image.seek(0)
    long_edge = max(width, height)
    if source_format == "JPEG" and long_edge > max_px:  # decode at a fraction of the size
        scale = max_px / long_edge
        image.draft("RGB", (math.ceil(width * scale), math.ceil(height * scale)))
    image.load()
    upright = ImageOps.exif_transpose(image)  # the orientation tag applied, and dropped
    source = _upright_size(image, (width, height))
    alpha = _has_alpha(upright)
    pixels = upright.convert("RGBA" if alpha else "RGB")
    pixels.thumbnail((max_px, max_px), Image.Resampling.LANCZOS)
    media_type, encoded = _encoded(pixels, alpha)
    while len(encoded) > MAX_ENCODED:  # rare: noise-like pixels at the largest size
        w, h = pixels.size
        if max(w, h) <= 64:
            raise Unreadable("it could not be made small enough for the model")
        pixels = pixels.resize((max(1, w * 3 // 4), max(1, h * 3 // 4)), Image.Resampling.LANCZOS)
        media_type, encoded = _encoded(pixels, alpha)
    return Picture(media_type, encoded, pixels.width, pixels.height, source, source_format, frames)


def _encoded(pixels: Image.Image, alpha: bool) -> tuple[str, bytes]:
    out = io.BytesIO()
    if alpha:
        pixels.save(out, "PNG", optimize=True)
        if out.tell() <= MAX_ENCODED:
            return "image/png", out.getvalue()
        out = io.BytesIO()
        pixels.save(out, "WEBP", quality=85)
        return "image/webp", out.getvalue()
    for quality in _JPEG_QUALITIES:
        out = io.BytesIO()
        pixels.save(out, "JPEG", quality=quality, optimize=True)
        if out.tell() <= MAX_ENCODED:
            break
    return "image/jpeg", out.getvalue()


def _has_alpha(image: Image.Image) -> bool:
    if image.mode in ("RGBA", "LA", "PA"):
        return image.getextrema()[-1][0] < 255  # type: ignore[index]
    return image.mode == "P" and "transparency" in image.info


def _upright_size(image: Image.Image, size: tuple[int, int]) -> tuple[int, int]:
    """The original's size as seen upright (orientations 5 to 8 turn it)."""
    try:
        orientation = image.getexif().get(0x0112, 1)
    except Exception:
        return size
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size
