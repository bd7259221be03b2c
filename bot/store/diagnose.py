"""Why the database cannot be used at startup, in words an operator can act on.

`explain()` turns what the driver, SQLAlchemy or Alembic raised while opening and
migrating the database into a `StartupError`: what is wrong, then what to do.
Nothing here repeats the URL (it may hold a password): only host, port, database
name, schema or SQLite path.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from bot.errors import StartupError

URL_HINT = "Check [database] url (SWITCHBOARD__DATABASE__URL)"
UPGRADE = "`switchboard db upgrade`"

# PostgreSQL SQLSTATE codes (https://www.postgresql.org/docs/current/errcodes-appendix.html)
_NO_DATABASE = "3D000"
_NO_SCHEMA = "3F000"
_NO_PRIVILEGE = "42501"
_LOGIN_REFUSED = {"28000", "28P01"}
_NOT_ACCEPTING = {"57P03", "53300"}  # starting up / shutting down; too many connections
_UNKNOWN_REVISION = re.compile(r"Can't locate revision identified by '([^']*)'")


def where(url: URL) -> str:
    """The database as an operator knows it, without credentials."""
    if url.get_backend_name() == "sqlite":
        return f"the SQLite database {sqlite_path(url)}"
    host = f"{url.host or 'localhost'}:{url.port or 5432}"
    return f"the PostgreSQL database {url.database or ''} at {host}"


def sqlite_path(url: URL) -> str:
    database = url.database or ":memory:"
    if database == ":memory:" or database.startswith("file:"):
        return database
    return str(Path(database).expanduser().resolve())


def explain(exc: BaseException, url: URL, schema: str | None) -> StartupError:
    """The `StartupError` for `exc`, raised while connecting or migrating."""
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, OSError):
        return StartupError(
            f"cannot reach {where(url)} ({_os_reason(exc)})",
            f"{URL_HINT} and that the server is running and accepts connections there.",
        )
    if isinstance(exc, DBAPIError):
        if url.get_backend_name() == "sqlite":
            return _sqlite(exc, url)
        return _postgresql(exc, url, schema)
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    unknown = _UNKNOWN_REVISION.search(message)
    if unknown:
        return StartupError(
            f"{where(url)} is at schema revision {unknown.group(1)!r}, which this version "
            "of switchboard does not know (a newer version migrated it?)",
            "Run the switchboard version that migrated it, or restore a backup from before.",
        )
    return StartupError(
        f"the migration of {where(url)} failed: {message}",
        f"Fix the cause, then run {UPGRADE} (add --debug for details).",
    )


def missing_tables(url: URL, tables: list[str], revision: str | None) -> StartupError:
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    return StartupError(
        f"the schema of {where(url)} is incomplete: {len(tables)} tables are missing "
        f"({shown}) though it is marked as migrated to {revision!r}",
        f"Restore it from a backup, or move it aside and run {UPGRADE} to create a new one.",
    )


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if exc.strerror:
        return exc.strerror.lower()
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _sqlite(exc: DBAPIError, url: URL) -> StartupError:
    reason = str(exc.orig) if exc.orig is not None else str(exc)
    path = sqlite_path(url)
    if "unable to open database file" in reason and Path(path).is_dir():
        return StartupError(
            f"cannot open {where(url)}: it is a directory",
            f"{URL_HINT}: it must name a file (e.g. {Path(path) / 'switchboard.db'}).",
        )
    if "unable to open database file" in reason:
        return StartupError(
            f"cannot open {where(url)} (unable to open database file)",
            f"Check that {Path(path).parent} exists and this user may write to it, "
            "or set [database] url (SWITCHBOARD__DATABASE__URL) to a writable path.",
        )
    if "readonly database" in reason or "read-only" in reason:
        return StartupError(
            f"{where(url)} is read-only",
            f"Make {path} and its directory writable by this user, or set [database] url.",
        )
    if "not a database" in reason:
        return StartupError(
            f"{path} is not a SQLite database",
            f"{URL_HINT}: it must name a SQLite file (or a new one).",
        )
    return StartupError(
        f"the migration of {where(url)} failed: {reason.splitlines()[0]}",
        f"Fix the cause, then run {UPGRADE} (add --debug for details).",
    )


def _postgresql(exc: DBAPIError, url: URL, schema: str | None) -> StartupError:
    code = _sqlstate(exc)
    reason = str(exc.orig).splitlines()[0] if exc.orig is not None else type(exc).__name__
    user = url.username or "(default user)"
    if code == _NO_DATABASE:
        return StartupError(
            f"{where(url)} does not exist",
            f"Create it (createdb {url.database}) or fix [database] url, then run {UPGRADE}.",
        )
    if code in _LOGIN_REFUSED:
        return StartupError(
            f"{where(url)} refused the login of {user} ({reason})",
            f"{URL_HINT}: its user and password.",
        )
    if code in _NOT_ACCEPTING:
        return StartupError(
            f"{where(url)} does not accept connections now ({reason})",
            "Wait for the server to start, or raise its max_connections.",
        )
    if code == _NO_SCHEMA:
        name = schema or "public"
        return StartupError(
            f"the schema {name!r} does not exist in {where(url)}",
            f"Create it (CREATE SCHEMA {name}) or fix [database] schema_name, then run {UPGRADE}.",
        )
    if code == _NO_PRIVILEGE:
        return StartupError(
            f"{user} may not create the tables in {where(url)} ({reason})",
            f"Run {UPGRADE} as the schema's owner, or GRANT CREATE ON SCHEMA "
            f"{schema or 'public'} TO {user}.",
        )
    return StartupError(
        f"the migration of {where(url)} failed: {reason}",
        f"Fix the cause, then run {UPGRADE} (add --debug for details).",
    )


def _sqlstate(exc: DBAPIError) -> str | None:
    for candidate in (exc.orig, getattr(exc.orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(code, str):
            return code
    return None
