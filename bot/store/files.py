"""The SQLite database file of a Store: its directory made when missing, and
the file made owner-only (0600) before SQLite makes it; SQLite gives the -wal
and -shm files the database file's mode. A file found with a wider mode is
left alone, with one WARNING."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from bot.errors import StartupError

log = logging.getLogger("switchboard.store")


def ensure_directory(database: str | None) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    directory = Path(database).expanduser().parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, FileExistsError | NotADirectoryError):
            reason = "a file is in the way"
        raise StartupError(
            f"cannot create the database directory {directory} ({reason.lower()})",
            "Create it, writable by this user, or set [database] url "
            "(SWITCHBOARD__DATABASE__URL) to a path that can be.",
        ) from exc


SQLITE_FILE_MODE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_file(database: str | None) -> None:
    """Create the database file owner-only before SQLite does (it would use
    0644 less the umask); warn once about existing files others can read."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SQLITE_FILE_MODE)
    except FileExistsError:
        pass
    except OSError:
        return  # SQLite cannot open it either, and `bot.store.diagnose` says why
    else:
        os.close(fd)
    wide: list[str] = []
    for file in (path, *(Path(f"{path}{suffix}") for suffix in SQLITE_SIDE_FILES)):
        try:
            status = file.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(status.st_mode)
        if stat.S_ISREG(status.st_mode) and mode & 0o077:
            wide.append(f"{file.name}:{mode:04o}")
    if wide:
        log.warning(
            "database.file_mode files=%s: readable beyond its owner; `chmod 600` them",
            ",".join(wide),
        )
