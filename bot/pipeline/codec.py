"""`IncomingMessage` ⇄ JSON, for the inbox: a message is stored whole, so a
process that takes it over can run it exactly as the one that accepted it would
have. Attachments keep their downloaded bytes (base64). The platform's raw
payload is not stored: nothing after intake reads it."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any

from bot.types import Attachment, IncomingMessage

_SKIP = frozenset({"raw"})
_VERSION = 1
_STORED = tuple(f.name for f in fields(IncomingMessage) if f.name not in _SKIP)
"""The fields stored, in order (every message is encoded once, at intake)."""


def encode(msg: IncomingMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"v": _VERSION}
    for name in _STORED:
        value = getattr(msg, name)
        if name == "attachments":
            value = [_encode_attachment(a) for a in value]
        elif name == "received_at":
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        data[name] = value
    return data


def decode(data: Mapping[str, Any]) -> IncomingMessage:
    if data.get("v") != _VERSION:
        raise ValueError(f"unknown inbox payload version {data.get('v')!r}")
    values: dict[str, Any] = {}
    for f in fields(IncomingMessage):
        if f.name in _SKIP or f.name not in data:
            continue
        value = data[f.name]
        if f.name == "attachments":
            value = tuple(_decode_attachment(a) for a in value)
        elif f.name == "received_at":
            value = datetime.fromisoformat(value)
        elif f.name == "mentioned_user_ids":
            value = tuple(value)
        values[f.name] = value
    return IncomingMessage(**values)


def _encode_attachment(attachment: Attachment) -> dict[str, Any]:
    data: dict[str, Any] = {f.name: getattr(attachment, f.name) for f in fields(Attachment)}
    if attachment.data is not None:
        data["data"] = base64.b64encode(attachment.data).decode("ascii")
    return data


def _decode_attachment(data: Mapping[str, Any]) -> Attachment:
    values = dict(data)
    if values.get("data") is not None:
        values["data"] = base64.b64decode(values["data"])
    return Attachment(**values)
