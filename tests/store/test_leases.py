"""Named leases: one holder across instances; taken over only once expired; a
stale release never frees a newer take; /stop requests reach the holder."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store.leases import Leases
from bot.types import utcnow


async def test_one_holder_until_it_expires(store):
    a, b = Leases(store, "a", 30), Leases(store, "b", 30)
    held = await a.acquire("conversation:x", user_id=7)
    assert held is not None
    assert await b.acquire("conversation:x") is None
    assert await a.acquire("conversation:x") is not None  # ours: taken again

    short = Leases(store, "c", 0.2)
    assert await short.acquire("conversation:y") is not None
    await asyncio.sleep(0.3)
    assert await b.acquire("conversation:y") is not None  # expired: taken over


async def test_a_stale_release_does_not_free_a_newer_take(store):
    a, b = Leases(store, "a", 30), Leases(store, "b", 30)
    first = await a.acquire("conversation:x")
    second = await a.acquire("conversation:x")
    assert first is not None and second is not None and first.token != second.token
    await a.release(first)
    assert await b.acquire("conversation:x") is None  # the newer take still holds
    await a.release(second)
    assert await b.acquire("conversation:x") is not None


async def test_renew_keeps_leases_and_reports_stop_requests(store):
    a, b = Leases(store, "a", 1), Leases(store, "b", 1)
    await a.acquire("conversation:x", user_id=7)
    await a.acquire("conversation:z")
    info = await b.request_stop("conversation:x", "slack:U2")
    assert info is not None and (info.owner, info.user_id) == ("a", 7)
    assert await a.renew() == ["conversation:x"]
    held = {lease.name: lease for lease in await b.listing("conversation:")}
    assert set(held) == {"conversation:x", "conversation:z"}
    assert held["conversation:x"].expires_at > utcnow() + timedelta(seconds=0.5)
    assert await b.request_stop("conversation:nobody", "slack:U2") is None


async def test_release_all_frees_everything_of_one_instance(store):
    a, b = Leases(store, "a", 30), Leases(store, "b", 30)
    await a.acquire("conversation:x")
    await a.acquire("leader:telegram")
    assert await a.release_all() == 2
    assert await b.acquire("leader:telegram") is not None
