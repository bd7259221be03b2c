"""Downloading a Slack message's files with the bot token (FileFetcher)
against the fake Slack's private file URLs and files.info."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.files import FileFetcher
from adapters.slack.parse import file_attachment
from bot.types import Attachment, IncomingMessage
from tests.fakes.slack import BOT_TOKEN, FakeSlack

pytest_plugins = ("tests.adapters.slack.fixtures",)


@pytest.fixture
async def fetcher(slack: FakeSlack) -> AsyncIterator[FileFetcher]:
    async with aiohttp.ClientSession() as http:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, session=http)
        yield FileFetcher(client, http, BOT_TOKEN, 1000, slack.api_url)


def message(*attachments: Attachment) -> IncomingMessage:
    return IncomingMessage("slack", "U1", "D1", "see attached", attachments=attachments)


async def fill_one(fetcher: FileFetcher, attachment: Attachment) -> Attachment:
    (done,) = (await fetcher.fill(message(attachment))).attachments
    return done


async def test_a_file_is_downloaded_with_the_bot_token(fetcher, slack):
    info = slack.add_file("notes.md", b"# Notes\nship it", "text/markdown")
    done = await fill_one(fetcher, file_attachment(info))
    assert (done.data, done.problem, done.size) == (b"# Notes\nship it", None, 15)
    assert slack.downloads == [(info["id"], True)]


async def test_a_file_shared_by_id_only_is_looked_up(fetcher, slack):
    info = slack.add_file("photo.png", b"\x89PNG....", "image/png")
    done = await fill_one(fetcher, file_attachment({"id": info["id"], "mode": "file_access"}))
    assert done.data == b"\x89PNG...." and done.kind == "image" and done.name == "photo.png"
    assert [c.args for c in slack.calls_to("files.info")] == [{"file": info["id"]}]


async def test_an_unknown_file_is_reported(fetcher, slack):
    done = await fill_one(fetcher, file_attachment({"id": "F404", "mode": "file_access"}))
    assert done.data is None and done.problem == "Slack would not share it (file_not_found)"


async def test_a_file_larger_than_the_limit_is_not_fetched(fetcher, slack):
    info = slack.add_file("big.bin", b"x" * 1001, "text/plain")
    done = await fill_one(fetcher, file_attachment(info))
    assert done.problem == "it is too large (1001 bytes; the limit is 1000 bytes)"
    assert slack.downloads == []


async def test_a_file_of_unknown_size_stops_at_the_limit(fetcher, slack):
    info = {**slack.add_file("stream.txt", b"y" * 5000, "text/plain"), "size": None}
    done = await fill_one(fetcher, file_attachment(info))
    assert done.data is None and done.problem == "it is larger than the 1000 bytes limit"


async def test_a_sign_in_page_is_not_taken_for_the_file(slack):
    """What Slack sends when the token may not read files (no files:read)."""
    info = slack.add_file("notes.txt", b"secret", "text/plain")
    async with aiohttp.ClientSession() as http:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, session=http)
        wrong = FileFetcher(client, http, "xoxb-not-the-token", 1000, slack.api_url)
        done = await fill_one(wrong, file_attachment(info))
    assert done.data is None and "files:read" in (done.problem or "")


async def test_links_off_slack_are_not_followed(fetcher, slack):
    foreign = Attachment("document", "F9", "x.txt", "text/plain", 3, "https://example.com/x.txt")
    done = await fill_one(fetcher, foreign)
    assert done.problem == "its download link is not on Slack" and slack.downloads == []
    assert fetcher._trusted("https://files.slack.com/files-pri/T1-F1/download/a.png")
    assert not fetcher._trusted("http://files.slack.com/insecure")
    assert not fetcher._trusted("https://slack.com.evil.example/x")


async def test_external_files_keep_their_problem(fetcher, slack):
    external = file_attachment(
        {"id": "F7", "mode": "external", "name": "Plan", "is_external": True}
    )
    done = await fill_one(fetcher, external)
    assert done.problem and "external" in done.problem and slack.downloads == []
