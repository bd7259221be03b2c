"""Media benchmark (`make bench`): what a phone photo costs the model before
and after the bot resizes it, and how long resizing takes. Prints figures;
asserts nothing.

A 4,000 × 3,000 JPEG (and a 12-megapixel iPhone-sized one), noisy enough to
weigh megabytes like a real photo, with an EXIF rotation, goes through
`bot.media.Media.prepare` as a file someone sent: decoded, turned upright,
shrunk to `[media] image_max_px` (1568) and re-encoded. For each:

- tokens by Anthropic's image formula, (width × height) / 750, for the photo
  as sent and for the bot's copy;
- what the API itself would charge for the copy (`bot.llm.tokens.block_tokens`,
  the estimate the budget reservation uses: models that read at most 1568 px
  and about 1,600 tokens shrink larger images themselves);
- the bytes uploaded as base64 against the API's 5 MB per image (over it, the
  API answers 400 and no retry helps);
- the median time to prepare one photo (a worker thread in the service).

    python -m tests.benchmarks.media [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import time

from bot.config.media import MediaSettings
from bot.llm.tokens import block_tokens, raw_image_tokens
from bot.llm.types import ImageBlock
from bot.media import Media, Sender
from bot.types import Attachment, IncomingMessage
from tests.media import samples

API_MAX_BASE64 = 5 * 1024 * 1024
SIZES = ((4000, 3000), (4032, 3024))


async def measure(width: int, height: int, runs: int) -> None:
    original = samples.photo(width, height, orientation=6)
    media = Media(MediaSettings())
    attachment = Attachment(
        "image", "bench", "photo.jpg", "image/jpeg", len(original), data=original
    )
    msg = IncomingMessage("bench", "u1", "c1", "", attachments=(attachment,))
    sender = Sender(conversation_id=1, user_id=1)
    timings = []
    block: ImageBlock | None = None
    for _ in range(runs):
        start = time.perf_counter()
        prepared = await media.prepare(msg, sender)
        timings.append(time.perf_counter() - start)
        [found] = prepared.parts[0].blocks
        assert isinstance(found, ImageBlock)
        block = found
    assert block is not None and block.width is not None and block.height is not None
    sent_b64 = len(base64.b64encode(original))
    copy_b64 = len(block.data_b64)
    # Stored landscape, shown portrait (orientation 6): the formula is the same.
    before = raw_image_tokens(width, height)
    after = raw_image_tokens(block.width, block.height)
    charged = block_tokens(block)
    print(f"photo {width}×{height} (EXIF orientation 6), {len(original) / 1e6:.1f} MB JPEG")
    print(
        f"  as sent:      {before:>7,} tokens by (w×h)/750; base64 {sent_b64 / 2**20:.1f} MiB"
        f"{' — over the 5 MB limit: the API refuses it (400)' if sent_b64 > API_MAX_BASE64 else ''}"
    )
    print(
        f"  bot's copy:   {after:>7,} tokens by (w×h)/750 at {block.width}×{block.height}; "
        f"base64 {copy_b64 / 2**20:.2f} MiB ({block.media_type})"
    )
    print(
        f"  API charges:  {charged:>7,} tokens for the copy (estimate; the API shrinks it to "
        "about 1.15 megapixels itself)"
    )
    print(
        f"  saved:        {1 - after / before:.0%} of the formula's tokens, "
        f"{1 - copy_b64 / sent_b64:.0%} of the bytes uploaded"
    )
    print(f"  prepare:      {statistics.median(timings) * 1000:.0f} ms median of {runs}")


async def main_async(runs: int) -> None:
    for width, height in SIZES:
        await measure(width, height, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="times each photo is prepared")
    args = parser.parse_args()
    asyncio.run(main_async(max(1, args.runs)))


if __name__ == "__main__":
    main()
