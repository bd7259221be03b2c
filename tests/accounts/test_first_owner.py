"""A fresh database's first owner: the operator at the terminal claims it once."""

from __future__ import annotations

from bot.accounts.identity import Identity
from bot.store import Store
from bot.types import Role


async def test_the_first_claim_makes_an_owner_and_later_ones_change_nothing(store: Store):
    identity = Identity(store, ())
    guest = await identity.resolve_account("console", "alice")
    assert guest.role is Role.GUEST

    owner = await identity.claim_first_owner("console", "alice", display_name="alice")
    assert owner is not None and owner.id == guest.id and owner.role is Role.OWNER
    assert (await identity.resolve_account("console", "alice")).role is Role.OWNER
    assert (await Identity(store, ()).resolve_account("console", "alice")).role is Role.OWNER

    assert await identity.claim_first_owner("console", "bob") is None
    assert (await identity.resolve_account("console", "bob")).role is Role.GUEST


async def test_a_configured_owner_already_in_the_database_blocks_the_claim(store: Store):
    identity = Identity(store, ["telegram:42"])
    await identity.resolve_account("telegram", "42")
    assert await identity.claim_first_owner("console", "alice") is None
    assert (await identity.resolve_account("console", "alice")).role is Role.GUEST
