"""How long a voice message or audio file is, before it is sent anywhere.

The platform's own figure first (Telegram, Discord and Slack say it), then
the container's (mutagen: Ogg Opus/Vorbis, MP3, MP4/M4A, FLAC, WAV, …), then
`ffprobe` for what mutagen does not read (WebM), when it is installed. Nothing
is decoded: OpenAI-compatible transcription endpoints take these containers
as they are. `ffprobe` is looked for once, at start (`find_ffprobe`): a
missing one is one WARNING then, not a failure per message.
"""

from __future__ import annotations

import asyncio
import io
import logging
import shutil

import mutagen

log = logging.getLogger("switchboard.media")

FFPROBE_TIMEOUT_S = 15.0


def find_ffprobe() -> str | None:
    path = shutil.which("ffprobe")
    if path is None:
        log.warning(
            "media.no_ffprobe: ffprobe (from ffmpeg) is not installed; the length of audio "
            "in containers mutagen does not read (WebM) is taken from the platform or, "
            "failing that, estimated from the file's size"
        )
    return path


def container_seconds(data: bytes) -> float | None:
    """The length mutagen reads from the container; None when it cannot."""
    try:
        found = mutagen.File(io.BytesIO(data))
    except Exception:  # mutagen's own errors, and garbage it trips on
        return None
    length = getattr(getattr(found, "info", None), "length", None)
    if isinstance(length, int | float) and length > 0:
        return float(length)
    return None


async def probe_seconds(ffprobe: str, data: bytes) -> float | None:
    """The length ffprobe reads from `data` (on its stdin); None when it cannot."""
    try:
        process = await asyncio.create_subprocess_exec(
            ffprobe,
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "default=noprint_wrappers=1:nokey=1",
            "-i",
            "pipe:0",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        log.warning("media.ffprobe_failed: %s", exc)
        return None
    try:
        out, _ = await asyncio.wait_for(process.communicate(data), FFPROBE_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    try:
        seconds = float(out.decode().strip())
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def clock(seconds: float) -> str:
    """1:05, 12:30, 1:02:03."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
