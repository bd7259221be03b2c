"""Logging setup: named loggers under "switchboard", text or JSON lines, and a
redaction filter so secrets never reach a log (including tokens inside URLs).

Our log calls read `log.info("run.done conversation=%s tokens=%d", ...)`: a
dotted event name, then `key=value` pairs, then free text. In JSON format the
event and the pairs also become top-level keys (`event`, `conversation`,
`tokens`; numbers stay numbers), next to the whole `message`; fields passed
with `extra=` become keys too. The text format prints the message as it is.

Every line logged while one message is handled carries its run id: the
pipeline opens a `run_scope` when it takes a message (a context variable, so
tasks spawned inside inherit it) and `RunIdFilter` puts it on each record
(`run_id` in JSON, ` [run=<id>]` after the logger name in text).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets as _random
import sys
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TextIO

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

# What every LogRecord has; anything else on a record came with `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "run_id",
}
_RESERVED = {"time", "level", "logger", "message", "event", "run_id", "exception"}
_EVENT = re.compile(r"([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+):?(?=\s|$)")
_FIELD = re.compile(r"""(?:^|(?<=[\s(\[,]))([a-z_][a-z0-9_]*)=('[^']*'|"[^"]*"|[^\s,;]+)""")
_INT = re.compile(r"-?(?:0|[1-9]\d{0,14})")
"""At most 15 digits: longer numbers are ids (Discord snowflakes) that JSON
readers would round; they stay strings."""
_FLOAT = re.compile(r"-?\d+\.\d+")


# -- the run id of the message being handled ----------------------------------


@dataclass(slots=True)
class _Scope:
    id: str
    claimed: bool
    """Whether a run took this id as its own (a second run gets a new one)."""


_scope: ContextVar[_Scope | None] = ContextVar("switchboard_run", default=None)


def new_run_id() -> str:
    return _random.token_hex(8)


def current_run_id() -> str | None:
    scope = _scope.get()
    return scope.id if scope is not None else None


@contextlib.contextmanager
def run_scope(run_id: str | None = None) -> Iterator[str]:
    """Lines logged inside (and in tasks started inside) carry this run id: a
    new one, or `run_id` when it names a run that exists already."""
    scope = _Scope(run_id or new_run_id(), claimed=run_id is not None)
    token = _scope.set(scope)
    try:
        yield scope.id
    finally:
        _scope.reset(token)


def claim_run_id() -> str:
    """The id for a run starting now: the current scope's (so the run in the
    database and the log lines of its message share one id), unless another
    run took it already; then a new one."""
    scope = _scope.get()
    if scope is None or scope.claimed:
        return new_run_id()
    scope.claimed = True
    return scope.id


class RunIdFilter(logging.Filter):
    """Puts the current run id on every record (`record.run_id`, None outside)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "run_id", None) is None:
            record.run_id = current_run_id()
        return True


# -- redaction ------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Replaces known secrets and token-shaped strings in every record: the
    message, the exception text and every string passed with `extra=`."""

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
        for key, value in extra_fields(record).items():
            if isinstance(value, str):
                setattr(record, key, self.redact(value))
            elif not isinstance(value, (int, float, bool)) and value is not None:
                setattr(record, key, self.redact(str(value)))
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed with `extra=`."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


# -- formats --------------------------------------------------------------------


def parse_fields(message: str) -> dict[str, Any]:
    """`event.name key=value …` → {"event": "event.name", "key": value, …}.
    Only for messages in our convention (starting with a dotted event name);
    numbers become numbers, quotes around a value go."""
    found = _EVENT.match(message)
    if found is None:
        return {}
    fields: dict[str, Any] = {"event": found.group(1)}
    for key, raw in _FIELD.findall(message, found.end()):
        if key in _RESERVED or key in fields:
            continue
        fields[key] = _value(_trim(raw))
    return fields


def _trim(raw: str) -> str:
    """`job=7:` → 7; `(id=3)` → 3; `[REDACTED]` stays whole."""
    raw = raw.rstrip(":")
    for opening, closing in ("()", "[]"):
        while raw.endswith(closing) and raw.count(closing) > raw.count(opening):
            raw = raw[:-1]
    return raw


def _value(raw: str) -> Any:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    if _INT.fullmatch(raw):
        return int(raw)
    if _FLOAT.fullmatch(raw) and sum(c.isdigit() for c in raw) <= 15:
        return float(raw)  # exact to 15 digits; a Slack ts ("1712345678.000100") stays text
    return raw


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the event
    and its fields as keys, `extra=` fields, `run_id` and `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        data: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        data.update(parse_fields(message))
        for key, value in extra_fields(record).items():
            if key not in _RESERVED:
                data[key] = value
        run_id = getattr(record, "run_id", None)
        if run_id is not None:
            data["run_id"] = run_id
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exception"] = record.exc_text
        return json.dumps(data, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger [run=<id>]: message` (the bracket only inside a run)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s%(run_tag)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        run_id = getattr(record, "run_id", None)
        record.run_tag = f" [run={run_id}]" if run_id else ""
        try:
            return super().format(record)
        finally:
            vars(record).pop("run_tag", None)


def setup_logging(
    level: str = "INFO",
    fmt: str = "text",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> RedactingFilter:
    handler = logging.StreamHandler(stream or sys.stderr)
    redactor = RedactingFilter(secrets)
    handler.addFilter(RunIdFilter())
    handler.addFilter(redactor)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("switchboard").setLevel(level)
    return redactor


@contextlib.contextmanager
def logs_through(redirect: Callable[[TextIO], TextIO | None]) -> Iterator[None]:
    """While inside, each handler of the root logger that writes to a stream
    writes where `redirect(its stream)` says instead (None: where it did).
    The terminal chat sends the lines meant for its own terminal through its
    live view, which prints them above what it draws rather than over it."""
    moved: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            target = redirect(handler.stream)
            if target is not None:
                moved.append((handler, handler.stream))
                handler.setStream(target)
    try:
        yield
    finally:
        for handler, stream in reversed(moved):
            handler.setStream(stream)
