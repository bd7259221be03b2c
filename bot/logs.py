"""Logging setup: named loggers under "switchboard", text or JSON lines, and a
redaction filter so secrets never reach a log (including tokens inside URLs)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from typing import TextIO

# Token shapes of the platforms we talk to, and Telegram's /bot<token>/ URLs.
_PATTERNS = [
    re.compile(r"(?<=/bot)\d+:[A-Za-z0-9_-]{20,}"),
    re.compile(r"\b\d{6,}:[A-Za-z0-9_-]{30,}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bsk-ant-[A-Za-z0-9_-]{10,}"),
    re.compile(r"(?i)(authorization|x-api-key)(['\"]?\s*[:=]\s*['\"]?)(bot |bearer )?[^\s'\",}]+"),
]
MASK = "[REDACTED]"


class RedactingFilter(logging.Filter):
    """Replaces known secrets and token-shaped strings in every record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for pattern in _PATTERNS:
            if pattern.groups >= 2:
                text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
            else:
                text = pattern.sub(MASK, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self.redact(formatted)
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            data["exception"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


def setup_logging(
    level: str = "INFO",
    fmt: str = "text",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> RedactingFilter:
    handler = logging.StreamHandler(stream or sys.stderr)
    redactor = RedactingFilter(secrets)
    handler.addFilter(redactor)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("switchboard").setLevel(level)
    return redactor
