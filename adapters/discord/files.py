"""Attachment downloads from Discord's CDN, within `discord.max_file_bytes`.

A file that is too large or fails to download keeps its metadata and gets a
`problem` the user is told about; it never disappears silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

import aiohttp

from bot.types import Attachment

log = logging.getLogger("switchboard.discord")

DOWNLOAD_TIMEOUT_S = 60.0


class Downloader:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S)
            self._session = aiohttp.ClientSession(timeout=timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch_all(self, attachments: Sequence[Attachment]) -> tuple[Attachment, ...]:
        return tuple(await asyncio.gather(*(self.fetch(a) for a in attachments)))

    async def fetch(self, attachment: Attachment) -> Attachment:
        if attachment.size is not None and attachment.size > self.max_bytes:
            return replace(attachment, problem=self._too_large(attachment.size))
        if not attachment.url:
            return replace(attachment, problem="Discord sent no download link")
        if self._session is None:
            raise RuntimeError("Downloader.open() was not called")
        try:
            async with self._session.get(attachment.url) as response:
                if response.status != 200:
                    return replace(attachment, problem=f"download failed (HTTP {response.status})")
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data.extend(chunk)
                    if len(data) > self.max_bytes:  # never trust the announced size
                        return replace(attachment, problem=self._too_large(None))
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("discord.download_failed file=%s: %s", attachment.file_id, exc)
            return replace(attachment, problem="download failed (Discord did not send it)")
        return replace(attachment, data=bytes(data), size=len(data))

    def _too_large(self, size: int | None) -> str:
        limit = f"the limit is {_megabytes(self.max_bytes)}"
        if size is None:
            return f"too large ({limit})"
        return f"too large ({_megabytes(size)}; {limit})"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
