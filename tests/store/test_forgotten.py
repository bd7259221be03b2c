"""`Forgotten`: which reads may be cached after a cache dropped a user's entries."""

from __future__ import annotations

import time

from bot.store.forgotten import Forgotten


def test_a_read_begun_before_a_users_drop_is_not_fresh_others_are():
    forgotten = Forgotten()
    before = time.monotonic()
    forgotten.forget(7)
    after = time.monotonic()
    assert not forgotten.fresh(7, before)
    assert forgotten.fresh(7, after + 1e-6)
    assert forgotten.fresh(8, before)  # another user's read: nothing of theirs changed


def test_dropping_everything_makes_every_read_begun_before_stale():
    forgotten = Forgotten()
    before = time.monotonic()
    forgotten.forget()
    assert not forgotten.fresh(7, before) and not forgotten.fresh(8, before)
    assert forgotten.fresh(8, time.monotonic() + 1e-6)


def test_past_its_limit_it_remembers_less_and_trusts_less_never_more():
    forgotten = Forgotten(limit=2)
    before = time.monotonic()
    forgotten.forget(1)
    forgotten.forget(2)
    forgotten.forget(3)  # a third user: as if all were dropped
    assert not any(forgotten.fresh(user, before) for user in (1, 2, 3, 4))
    later = time.monotonic() + 1e-6
    assert all(forgotten.fresh(user, later) for user in (1, 2, 4))
