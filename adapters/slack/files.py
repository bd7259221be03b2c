"""Download the files of a Slack message with the bot token (needs `files:read`).

Each file becomes an `Attachment` with `data`, or with a `problem` the user is
told about (too large, external link, download refused). The token is only
sent to Slack's own file hosts (or to the configured API host, so a local fake
can serve files); a link anywhere else is not followed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.delivery import api_error
from adapters.slack.parse import file_attachment
from bot.types import Attachment, IncomingMessage

log = logging.getLogger("switchboard.slack.files")

SLACK_FILE_DOMAINS = ("slack.com", "slack-edge.com", "slack-gov.com")
DOWNLOAD_TIMEOUT_S = 60.0
_CHUNK = 64 * 1024


class FileFetcher:
    def __init__(
        self,
        client: AsyncWebClient,
        http: aiohttp.ClientSession,
        token: str,
        max_bytes: int,
        api_base_url: str,
    ) -> None:
        self._client = client
        self._http = http
        self._token = token
        self._max = max_bytes
        self._api_host = urlsplit(api_base_url).netloc

    async def fill(self, msg: IncomingMessage) -> IncomingMessage:
        """The message with every attachment downloaded or marked with a problem."""
        if not msg.attachments:
            return msg
        done = tuple([await self._fetch(a) for a in msg.attachments])
        return dataclasses.replace(msg, attachments=done)

    async def _fetch(self, attachment: Attachment) -> Attachment:
        if attachment.problem or attachment.data is not None:
            return attachment
        if attachment.url is None:  # shared as {"id", "mode": "file_access"}
            try:
                response = await self._client.files_info(file=attachment.file_id)
            except SlackApiError as exc:
                status, code = api_error(exc)
                error = code or f"HTTP {status}"
                log.warning("file.info_failed file=%s error=%s", attachment.file_id, error)
                return _problem(attachment, f"Slack would not share it ({error})")
            info = response.get("file")
            if not isinstance(info, Mapping):
                return _problem(attachment, "Slack sent no details for it")
            attachment = file_attachment(info)
            if attachment.problem:
                return attachment
            if attachment.url is None:
                return _problem(attachment, "Slack gave no download link for it")
        assert attachment.url is not None
        if attachment.size is not None and attachment.size > self._max:
            return _problem(attachment, self._too_large(attachment.size))
        if not self._trusted(attachment.url):
            return _problem(attachment, "its download link is not on Slack")
        return await self._download(attachment, attachment.url)

    async def _download(self, attachment: Attachment, url: str) -> Attachment:
        headers = {"Authorization": f"Bearer {self._token}"}
        timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S)
        try:
            async with self._http.get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    return _problem(attachment, f"the download failed (HTTP {response.status})")
                if response.content_type == "text/html" and attachment.mime_type != "text/html":
                    # Slack's answer to a token without files:read: a sign-in page.
                    return _problem(
                        attachment,
                        "Slack sent a sign-in page instead of the file "
                        "(does the app have the files:read scope?)",
                    )
                data = bytearray()
                async for chunk in response.content.iter_chunked(_CHUNK):
                    data += chunk
                    if len(data) > self._max:
                        return _problem(attachment, self._too_large(None))
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning(
                "file.download_failed file=%s error=%s", attachment.file_id, type(exc).__name__
            )
            return _problem(attachment, "the download failed")
        return dataclasses.replace(attachment, data=bytes(data), size=len(data))

    def _trusted(self, url: str) -> bool:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.netloc == self._api_host:
            return True
        if parts.scheme != "https":
            return False
        return any(host == d or host.endswith("." + d) for d in SLACK_FILE_DOMAINS)

    def _too_large(self, size: int | None) -> str:
        limit = _mb(self._max)
        if size is None:
            return f"it is larger than the {limit} limit"
        return f"it is too large ({_mb(size)}; the limit is {limit})"


def _problem(attachment: Attachment, problem: str) -> Attachment:
    return dataclasses.replace(attachment, problem=problem)


def _mb(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"


def describe(attachments: Sequence[Attachment]) -> str:
    """For logs: names and outcomes, never contents."""
    parts = []
    for a in attachments:
        state = "ok" if a.data is not None else (a.problem or "not downloaded")
        parts.append(f"{a.name or a.file_id}:{state}")
    return ",".join(parts)
