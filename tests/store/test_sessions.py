"""Sessions are kept for the next transaction once closed after a commit: what
one transaction loaded or failed on never reaches the next (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from bot.store import Store
from bot.store.models import PlatformLink, User
from bot.store.rows import execute


async def _user(store: Store, name: str) -> int:
    async with store.write() as session:
        user = User(display_name=name, role="guest")
        session.add(user)
        await session.flush()
        assert user.id is not None
        return user.id


async def test_a_kept_session_starts_empty_and_sees_what_others_committed(store: Store):
    user_id = await _user(store, "before")
    async with store.read() as session:
        first = await session.get(User, user_id)
        assert first is not None and first.display_name == "before"
        kept = session
    # Changed behind the first session's back, by another transaction.
    async with store.write() as session:
        await execute(
            session, update(User).where(User.id == user_id).values(display_name="after"), {}
        )
    async with store.read() as session:
        assert session is kept  # the same session, reused
        assert first not in session  # nothing loaded before is in its identity map
        again = await session.get(User, user_id)
        assert again is not None and again is not first
        assert again.display_name == "after"
    assert first.display_name == "before"  # the object read earlier is left as it was


async def test_a_session_whose_transaction_failed_is_not_kept(store: Store):
    user_id = await _user(store, "someone")
    async with store.write() as session:
        ok = session
    link = {"user_id": user_id, "platform": "telegram", "platform_user_id": "42"}
    async with store.write() as session:
        assert session is ok
        session.add(PlatformLink(**link))
    with pytest.raises(IntegrityError):
        async with store.write() as session:
            assert session is ok
            session.add(PlatformLink(**link))  # the same account twice
            await session.flush()
    async with store.write() as session:
        assert session is not ok  # the failed one was dropped, not handed out again
        session.add(PlatformLink(user_id=user_id, platform="slack", platform_user_id="U1"))
    async with store.read() as session:
        rows = (await session.exec(select(PlatformLink.platform))).all()
    assert sorted(rows) == ["slack", "telegram"]


async def test_concurrent_transactions_get_sessions_of_their_own(store: Store):
    seen: list[object] = []
    all_in = asyncio.Barrier(3)

    async def reader() -> None:
        async with store.read() as session:
            seen.append(session)
            await all_in.wait()  # three transactions open at once
            await session.get(User, 1)

    await asyncio.gather(*(reader() for _ in range(3)))
    assert len({id(session) for session in seen}) == 3
