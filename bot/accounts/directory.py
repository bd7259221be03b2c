"""Finding people: `@user` in commands, `USER` on the command line.

A target may be written as
- a platform mention: Slack `<@U123>` / `<@U123|name>`, Discord `<@123>` /
  `<@!123>`, Telegram `@username` (seen before) or a Telegram text mention
  (the adapter puts its user id in `IncomingMessage.mentioned_user_ids`);
- `platform:platform_user_id`, e.g. `console:bob`, `telegram:4242`;
- the internal user id, e.g. `12` or `#12`.

Accounts named by a verified platform mention (an id in `mentioned_user_ids`)
are created as guests when new, so an admin can set a budget or role before the
person first writes; every other unknown target is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, update
from sqlmodel import col, select

from bot.accounts.identity import Identity
from bot.store import Store
from bot.store.coordination import announce_account
from bot.store.models import PlatformLink, User
from bot.types import Role, utcnow

_SLACK_OR_DISCORD = re.compile(r"^<@!?([A-Za-z0-9]+)(?:\|[^>]*)?>$")
_INTERNAL = re.compile(r"^#?(\d+)$")
_ACCOUNT = re.compile(r"^([a-z][a-z0-9_-]*):(\S+)$")


class UnknownUser(LookupError):
    """No user matches; the message says what was tried and what would work."""


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    role: Role
    display_name: str | None
    accounts: tuple[str, ...]
    """"platform:platform_user_id" of every linked account, oldest first."""

    @property
    def handle(self) -> str:
        return self.accounts[0] if self.accounts else f"user {self.id}"

    @property
    def label(self) -> str:
        name = self.display_name or self.handle
        return f"{name} (#{self.id}, {', '.join(self.accounts) or 'no accounts'})"


class Directory:
    def __init__(self, store: Store, identity: Identity) -> None:
        self._store = store
        self._identity = identity

    async def get(self, user_id: int) -> Person | None:
        async with self._store.read() as session:
            user = await session.get(User, user_id)
            if user is None:
                return None
            links = (
                await session.exec(
                    select(PlatformLink)
                    .where(PlatformLink.user_id == user_id)
                    .order_by(col(PlatformLink.id))
                )
            ).all()
        return Person(
            id=user_id,
            role=Role(user.role),
            display_name=user.display_name or next((x.display_name for x in links), None),
            accounts=tuple(f"{x.platform}:{x.platform_user_id}" for x in links),
        )

    async def people(self, limit: int = 500) -> list[Person]:
        """Everyone (up to `limit`, oldest account first), with their accounts."""
        async with self._store.read() as session:
            users = (await session.exec(select(User).order_by(col(User.id)).limit(limit))).all()
            links = (
                await session.exec(
                    select(PlatformLink)
                    .where(col(PlatformLink.user_id).in_([u.id for u in users]))
                    .order_by(col(PlatformLink.id))
                )
            ).all()
        by_user: dict[int, list[PlatformLink]] = {}
        for link in links:
            by_user.setdefault(link.user_id, []).append(link)
        people = []
        for user in users:
            assert user.id is not None
            own = by_user.get(user.id, [])
            people.append(
                Person(
                    id=user.id,
                    role=Role(user.role),
                    display_name=user.display_name or next((x.display_name for x in own), None),
                    accounts=tuple(f"{x.platform}:{x.platform_user_id}" for x in own),
                )
            )
        return people

    async def by_account(self, platform: str, platform_user_id: str) -> Person | None:
        user_id = await self._identity.find_account(platform, platform_user_id)
        return None if user_id is None else await self.get(user_id)

    async def by_username(self, platform: str, username: str) -> Person | None:
        name = username.lstrip("@").lower()
        async with self._store.read() as session:
            user_id = (
                await session.exec(
                    select(PlatformLink.user_id)
                    .where(
                        PlatformLink.platform == platform,
                        func.lower(func.ltrim(col(PlatformLink.username), "@")) == name,
                    )
                    .order_by(col(PlatformLink.id).desc())
                )
            ).first()
        return None if user_id is None else await self.get(user_id)

    async def account_on(self, user_id: int, platform: str) -> str | None:
        """The user's (oldest) account id on `platform`."""
        async with self._store.read() as session:
            return (
                await session.exec(
                    select(PlatformLink.platform_user_id)
                    .where(PlatformLink.user_id == user_id, PlatformLink.platform == platform)
                    .order_by(col(PlatformLink.id))
                )
            ).first()

    async def lookup(
        self,
        token: str,
        *,
        platform: str | None = None,
        mentioned: Sequence[str] = (),
    ) -> Person:
        """Resolve a target as written by a person. Raises `UnknownUser`."""
        token = token.strip()
        mention = _SLACK_OR_DISCORD.match(token)
        if mention and platform:
            return await self._mentioned(platform, mention[1], mention[1] in mentioned, token)
        if token.startswith("@") and platform and len(token) > 1:
            found = await self.by_username(platform, token) or await self.by_account(
                platform, token[1:]
            )
            if found is not None:
                return found
            if mentioned:  # a Telegram text mention: the adapter gives the id
                return await self._mentioned(platform, mentioned[0], True, token)
            raise UnknownUser(
                f"I don't know {token} on {platform} yet (they must have written here "
                f"before), or use {platform}:<user id> or the internal user id"
            )
        account = _ACCOUNT.match(token)
        if account:
            found = await self.by_account(account[1], account[2])
            if found is None:
                raise UnknownUser(f"no user has the account {token}")
            return found
        internal = _INTERNAL.match(token)
        if internal:
            found = await self.get(int(internal[1]))
            if found is None:
                raise UnknownUser(f"there is no user #{internal[1]}")
            return found
        raise UnknownUser(
            f"{token!r} is not a user: use a mention, platform:user_id "
            "(e.g. telegram:4242) or the internal user id (e.g. 12)"
        )

    async def _mentioned(
        self, platform: str, platform_user_id: str, verified: bool, token: str
    ) -> Person:
        found = await self.by_account(platform, platform_user_id)
        if found is not None:
            return found
        if not verified:
            raise UnknownUser(f"I don't know {token} on {platform} yet")
        record = await self._identity.resolve_account(platform, platform_user_id)
        person = await self.get(record.id)
        assert person is not None
        return person

    async def set_role(self, user_id: int, role: Role) -> None:
        async with self._store.write() as session:
            await announce_account(session, self._store, user_id)
            await session.exec(
                update(User)
                .where(col(User.id) == user_id)
                .values(role=role.value, updated_at=utcnow())
            )
        self._identity.forget(user_id)
