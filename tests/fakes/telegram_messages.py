"""The message methods of the fake Bot API (tests/fakes/telegram.py): sendMessage,
editMessageText, deleteMessage and sendMessageDraft, checked as Telegram checks them.

- Texts: parse_mode=HTML parsed with `telegram_html.parse_html` (400 "can't parse
  entities"), 1-4,096 visible UTF-16 units (drafts: 0-4,096), inline keyboards checked.
- editMessageText: 400 "message to edit not found" for a message the bot does not
  have; 400 "message is not modified" when text and keyboard are what it shows.
- deleteMessage: 400 "message to delete not found" when it is not there (any more).
- sendMessageDraft (Bot API 9.3): private chats only, a non-zero `draft_id`; the
  draft a chat shows is kept in `drafts` (the latest text per draft id). With
  `drafts_supported = False` the method is unknown (404), as on an older server.

The current state is readable: `shown(chat_id)` (message id -> visible text of the
messages still there) and `drafts`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any

from tests.fakes.telegram_html import HtmlError, parse_html
from tests.fakes.telegram_wire import ApiError, Call, Refused, bad_request, inline_keyboard

MAX_TEXT = 4096
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)


class MessageMethods:
    """Mixed into `FakeTelegram` (which provides the lock and the bot user)."""

    _lock: threading.RLock
    bot_user: dict[str, Any]

    def _init_messages(self) -> None:
        self._next_message = itertools.count(1)
        self._messages: dict[tuple[str, int], tuple[str, Any]] = {}
        """(chat, message id) -> (visible text, inline keyboard or None)."""
        self.drafts: dict[tuple[str, int], str] = {}
        """(chat, draft_id) -> the visible text the draft shows last."""
        self.drafts_supported = True

    def shown(self, chat_id: str | int) -> dict[int, str]:
        """The bot's messages still in the chat: message id -> visible text."""
        with self._lock:
            return {
                mid: text
                for (chat, mid), (text, _) in self._messages.items()
                if chat == str(chat_id)
            }

    async def _m_sendmessage(self, params: dict[str, Any], call: Call) -> Any:
        chat_id = params.get("chat_id")
        if chat_id is None:
            raise Refused(bad_request("chat not found"))
        visible = self._visible(params, call)
        keyboard = inline_keyboard(params.get("reply_markup"))
        message_id = next(self._next_message)
        with self._lock:
            self._messages[(str(chat_id), message_id)] = (visible, keyboard)
        sent = self._message(chat_id, message_id, visible, params.get("message_thread_id"))
        if keyboard:
            sent["reply_markup"] = {"inline_keyboard": keyboard}
        return sent

    async def _m_editmessagetext(self, params: dict[str, Any], call: Call) -> Any:
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        key = (str(chat_id), int(message_id or 0))
        with self._lock:
            old = self._messages.get(key)
        if old is None:
            raise Refused(bad_request("message to edit not found"))
        visible = self._visible(params, call)
        keyboard = inline_keyboard(params.get("reply_markup"))
        if (visible, keyboard) == old:
            raise Refused(bad_request(NOT_MODIFIED))
        with self._lock:
            self._messages[key] = (visible, keyboard)
        edited = dict(self._message(chat_id, key[1], visible, None), edit_date=int(time.time()))
        if keyboard:
            edited["reply_markup"] = {"inline_keyboard": keyboard}
        return edited

    async def _m_deletemessage(self, params: dict[str, Any], call: Call) -> Any:
        key = (str(params.get("chat_id")), int(params.get("message_id") or 0))
        with self._lock:
            if self._messages.pop(key, None) is None:
                raise Refused(bad_request("message to delete not found"))
        return True

    async def _m_sendmessagedraft(self, params: dict[str, Any], call: Call) -> Any:
        if not self.drafts_supported:
            raise Refused(ApiError(404, "Not Found"))
        chat_id, draft_id = params.get("chat_id"), params.get("draft_id")
        if not isinstance(chat_id, int) or chat_id <= 0:
            raise Refused(bad_request("TEXTDRAFT_PEER_INVALID"))
        if not isinstance(draft_id, int) or draft_id == 0:
            raise Refused(bad_request("DRAFT_ID_INVALID"))
        visible = self._visible(params, call, empty_ok=True) if params.get("text") else ""
        with self._lock:
            self.drafts[(str(chat_id), draft_id)] = visible
        return True

    def _visible(self, params: Mapping[str, Any], call: Call, *, empty_ok: bool = False) -> str:
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise Refused(bad_request("message text is empty"))
        mode = params.get("parse_mode")
        if mode is None or mode == "":
            visible = text
        elif str(mode).lower() == "html":
            try:
                visible = parse_html(text)
            except HtmlError as exc:
                raise Refused(bad_request(f"can't parse entities: {exc}")) from None
        else:
            raise Refused(bad_request(f"unsupported parse_mode {mode!r} in this fake"))
        if not visible.strip() and not empty_ok:
            raise Refused(bad_request("message text is empty"))
        if len(visible.encode("utf-16-le")) // 2 > MAX_TEXT:
            raise Refused(bad_request("message is too long"))
        call.visible_text = visible
        return visible

    def _message(self, chat_id: Any, message_id: int, text: str, thread_id: Any) -> dict[str, Any]:
        chat_type = "supergroup" if str(chat_id).startswith("-") else "private"
        message: dict[str, Any] = {
            "message_id": message_id,
            "from": self.bot_user,
            "chat": {"id": int(chat_id), "type": chat_type},
            "date": int(time.time()),
            "text": text,
        }
        if thread_id is not None:
            message.update(message_thread_id=int(thread_id), is_topic_message=True)
        return message
