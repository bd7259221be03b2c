"""Revoked admin sessions, shared by every instance on the database.

Logging out of `/admin` records the session here (`RevokedSession`: the
SHA-256 of its nonce, never the cookie, and when the session would have
expired); every instance reads the list and refuses those cookies
(`bot.web.admin.revoked`). A row is useless once its session has expired, so
each logout deletes the expired ones in the same transaction: the table holds
at most the logouts of the last session lifetime.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select

from bot.store.db import Store
from bot.store.models import RevokedSession
from bot.types import utcnow


def digest(nonce: str) -> str:
    """What is stored of a session's nonce (hex SHA-256). The nonce is 144
    random bits, so the digest cannot be turned back into it; and a nonce
    alone is not a cookie (that needs the token's MAC)."""
    return hashlib.sha256(nonce.encode("utf-8")).hexdigest()


async def revoke(store: Store, nonce: str, expires_at: datetime) -> None:
    """Record the session `nonce` as ended until `expires_at`, and forget the
    sessions that have expired since. Recording it twice is harmless (two
    instances logging out the same session at once)."""
    insert = (sqlite if store.is_sqlite else postgresql).insert
    async with store.write() as session:
        await session.exec(delete(RevokedSession).where(col(RevokedSession.expires_at) <= utcnow()))
        await session.exec(
            insert(RevokedSession)
            .values(digest=digest(nonce), expires_at=expires_at, revoked_at=utcnow())
            .on_conflict_do_nothing(index_elements=["digest"])
        )


async def revoked(store: Store) -> frozenset[str]:
    """The digests of the sessions ended and not yet expired (one read)."""
    async with store.read() as session:
        rows = await session.exec(
            select(RevokedSession.digest).where(col(RevokedSession.expires_at) > utcnow())
        )
        return frozenset(rows.all())
