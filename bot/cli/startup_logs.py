"""Log records of a starting service, held until it has started.

A service that cannot start says so in one line (`switchboard: ...`), and the
INFO lines of the steps that did work before it (personas synced, web server
listening) would only bury it. So while `switchboard run` starts, the root
logger's records wait here: once everything is up they are written as usual,
in order, with their original times; when the start fails, only warnings and
errors are, without tracebacks (`--debug` keeps everything).
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Self


class HeldLogs(logging.Handler):
    def __init__(self, *, verbose: bool = False) -> None:
        super().__init__(logging.NOTSET)
        self._verbose = verbose
        self._records: list[logging.LogRecord] = []
        self._handlers: list[logging.Handler] = []

    def emit(self, record: logging.LogRecord) -> None:
        self._records.append(record)

    def __enter__(self) -> Self:
        root = logging.getLogger()
        self._handlers = list(root.handlers)
        for handler in self._handlers:
            root.removeHandler(handler)
        root.addHandler(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        for handler in self._handlers:
            root.addHandler(handler)
        failed = exc_type is not None and not self._verbose
        records, self._records = self._records, []
        for record in records:
            if failed:
                if record.levelno < logging.WARNING:
                    continue
                record = _without_traceback(record)
            for handler in self._handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)


def _without_traceback(record: logging.LogRecord) -> logging.LogRecord:
    if not (record.exc_info or record.exc_text or record.stack_info):
        return record
    copy = logging.makeLogRecord(record.__dict__)
    copy.exc_info, copy.exc_text, copy.stack_info = None, None, None
    return copy
