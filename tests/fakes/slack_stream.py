"""The fake Slack's message edits and native streams, as the Web API answers them.

- ``chat.startStream`` (``channel``, ``thread_ts``, ``recipient_user_id`` and
  ``recipient_team_id`` required; ``markdown_text`` or ``chunks`` of type
  ``markdown_text``) posts a message in streaming state: ``{"ok": true,
  "channel", "ts"}``;
- ``chat.appendStream`` (``channel``, ``ts``, text) appends a DELTA:
  ``message_not_in_streaming_state`` once the stream was stopped or expired
  (`expire_stream`), ``message_not_found`` for an unknown ``ts``;
- ``chat.stopStream`` ends it (optionally appending a last text), answering
  ``{"ok": true, "channel", "ts", "message"}``;
- ``chat.update`` replaces ``text``; ``blocks`` replaces the blocks, ``[]``
  removes them, leaving it out keeps them (Slack's documented rule). A message
  still streaming answers ``streaming_state_conflict``;
- ``chat.delete`` removes the message (``message_not_found`` when gone).

A channel in `no_streams` answers ``chat.startStream`` with
``channel_type_not_supported``. Each streamed message keeps its ``deltas`` and
each message its ``edits`` (texts, in order); deleted ones move to ``deleted``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from tests.fakes.slack_blocks import blocks_problem

MAX_MARKDOWN = 12_000  # markdown_text per call


class Recorded(Protocol):
    method: str
    args: dict[str, Any]
    status: int
    error: str | None


def ok(data: Mapping[str, Any]) -> web.Response:
    return web.json_response({"ok": True, **data})


def error(call: Recorded, code: str, status: int = 200) -> web.Response:
    call.status, call.error = status, code
    return web.json_response({"ok": False, "error": code}, status=status)


class StreamMethods:
    """Mixed into `FakeSlack` (which holds the state used here)."""

    messages: list[dict[str, Any]]
    deleted: list[dict[str, Any]]
    no_streams: set[str]
    block_problems: list[str]
    unknown_channels: set[str]
    left_channels: set[str]
    bot_user_id: str
    bot_id: str
    _ts: Any

    def stream_methods(self) -> dict[str, Any]:
        return {
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "chat.update": self._update,
            "chat.delete": self._delete,
        }

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        for message in self.messages:
            if message["channel"] == channel and message["ts"] == ts:
                return message
        return None

    def expire_stream(self, ts: str) -> None:
        """End a stream on Slack's side, as Slack does after about 5 minutes."""
        for message in self.messages:
            if message["ts"] == ts:
                message["streaming"] = False

    def new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _as_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": message["text"],
            "ts": message["ts"],
            **({"blocks": message["blocks"]} if message.get("blocks") else {}),
        }

    def _start_stream(self, call: Recorded) -> web.Response:
        channel = str(call.args.get("channel") or "")
        if not channel or channel in self.unknown_channels:
            return error(call, "channel_not_found")
        if channel in self.left_channels:
            return error(call, "not_in_channel")
        if channel in self.no_streams:
            return error(call, "channel_type_not_supported")
        if not call.args.get("thread_ts"):
            return error(call, "invalid_arguments")
        for field in ("recipient_user_id", "recipient_team_id"):
            if not call.args.get(field):
                return error(call, f"missing_{field}")
        text = _markdown(call.args)
        if text is None:
            return error(call, "invalid_chunks")
        if len(text) > MAX_MARKDOWN:
            return error(call, "msg_too_long")
        ts = self.new_ts()
        self.messages.append(
            {
                "channel": channel,
                "text": text,
                "thread_ts": call.args.get("thread_ts"),
                "ts": ts,
                "mrkdwn": None,
                "blocks": None,
                "streaming": True,
                "deltas": [text] if text else [],
                "recipient": (call.args.get("recipient_user_id"), call.args["recipient_team_id"]),
                "edits": [],
            }
        )
        return ok({"channel": channel, "ts": ts})

    def _streaming(self, call: Recorded) -> dict[str, Any] | web.Response:
        message = self.message(str(call.args.get("channel")), str(call.args.get("ts")))
        if message is None:
            return error(call, "message_not_found")
        if not message.get("streaming"):
            return error(call, "message_not_in_streaming_state")
        return message

    def _append_stream(self, call: Recorded) -> web.Response:
        message = self._streaming(call)
        if isinstance(message, web.Response):
            return message
        text = _markdown(call.args)
        if not text:
            return error(call, "invalid_arguments")
        if len(text) > MAX_MARKDOWN:
            return error(call, "msg_too_long")
        message["text"] += text
        message["deltas"].append(text)
        return ok({"channel": message["channel"], "ts": message["ts"]})

    def _stop_stream(self, call: Recorded) -> web.Response:
        message = self._streaming(call)
        if isinstance(message, web.Response):
            return message
        if text := _markdown(call.args):
            message["text"] += text
            message["deltas"].append(text)
        message["streaming"] = False
        return ok(
            {
                "channel": message["channel"],
                "ts": message["ts"],
                "message": self._as_message(message),
            }
        )

    def _update(self, call: Recorded) -> web.Response:
        message = self.message(str(call.args.get("channel")), str(call.args.get("ts")))
        if message is None:
            return error(call, "message_not_found")
        if message.get("streaming"):
            return error(call, "streaming_state_conflict")
        text, blocks = call.args.get("text"), call.args.get("blocks")
        if not text and not blocks:
            return error(call, "no_text")
        if blocks and (problem := blocks_problem(blocks)):
            self.block_problems.append(problem)
            return error(call, "invalid_blocks")
        message["text"] = text
        if blocks is not None:
            message["blocks"] = blocks or None
        message.setdefault("edits", []).append(text)
        return ok(
            {
                "channel": message["channel"],
                "ts": message["ts"],
                "text": text,
                "message": self._as_message(message),
            }
        )

    def _delete(self, call: Recorded) -> web.Response:
        message = self.message(str(call.args.get("channel")), str(call.args.get("ts")))
        if message is None:
            return error(call, "message_not_found")
        self.messages.remove(message)
        self.deleted.append(message)
        return ok({"channel": message["channel"], "ts": message["ts"]})


def _markdown(args: Mapping[str, Any]) -> str | None:
    """The text of a call: `markdown_text`, or its `chunks` of type markdown_text
    (what slack_sdk's `chat_stream` helper sends); None for malformed chunks."""
    chunks = args.get("chunks")
    if chunks is None:
        return str(args.get("markdown_text") or "")
    if not isinstance(chunks, list):
        return None
    parts = []
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type") != "markdown_text":
            return None
        parts.append(str(chunk.get("text") or ""))
    return str(args.get("markdown_text") or "") + "".join(parts)
