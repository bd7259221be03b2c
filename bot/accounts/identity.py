"""Who is talking: platform account → user. Unknown people become guests.

Owners are listed in config as "platform:user_id" and always get the owner role.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy
from sqlalchemy import bindparam, case, exists, func, literal, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store import Store, mechanisms
from bot.store.forgotten import Forgotten
from bot.store.models import Budget, Memory, PlatformLink, User
from bot.store.rows import execute, insert_returning_ids, insert_rows, new_row
from bot.types import IncomingMessage, Role, utcnow

log = logging.getLogger("switchboard.identity")

CACHE_TTL_S = 30.0
_NO_CACHE = mechanisms.off("caches")
"""How long a resolved account is trusted without reading the database again.
Changes made through this service take effect at once; so do changes made by
another process sharing the database (the CLI, another instance), which this
process hears of before its next message (`bot.store.outside`). The TTL is the
backstop should that news not arrive (a PostgreSQL listener lost)."""
CACHE_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: int
    role: Role
    display_name: str | None
    platform: str
    platform_user_id: str

    @property
    def handle(self) -> str:
        return f"{self.platform}:{self.platform_user_id}"


Also = Callable[[AsyncSession, int], Awaitable[Callable[[], None]]]
"""Work for the transaction that creates an account (given its session and the
new account's id): it writes, and returns what to call once that transaction
has committed. On PostgreSQL the session is in autocommit: the work runs at
most one statement that waits, which the account's rows ride on (`_create`)."""


def current_period() -> str:
    """The budget month, "YYYY-MM" (UTC)."""
    now = utcnow()
    return f"{now.year:04d}-{now.month:02d}"


@dataclass(frozen=True, slots=True)
class AccountRead:
    """What the account's read brings along of the user's other rows, for
    their caches (`Identity`'s `on_read`)."""

    user_id: int
    limit_mode: str | None
    """The budget row's limit mode (None: the user has no budget row)."""
    limit_tokens: int | None
    has_memories: bool
    read_at: float
    """when the read began (`time.monotonic()`): a cache that dropped the
    user's entries since keeps none of this (`bot.store.forgotten`)"""


class Identity:
    def __init__(
        self,
        store: Store,
        owners: Iterable[str],
        on_created: Iterable[Callable[[int], None]] = (),
        on_read: Iterable[Callable[[AccountRead], None]] = (),
    ) -> None:
        self._store = store
        self._owners = frozenset(owners)
        self._cache: dict[tuple[str, str], tuple[float, UserRecord, str | None]] = {}
        self._forgotten = Forgotten(CACHE_LIMIT)
        """when each user's accounts were dropped: a read begun before is not cached"""
        self._on_created = tuple(on_created)
        """Told each new user's id: what a user created here has is known
        (a budget of its role's allowance, no memories), no need to read it."""
        self._on_read = tuple(on_read)
        """Told, each time an existing account is read (someone not seen
        lately), its budget's limit and whether the user has memories, read in
        the same statement: the budget check and the memory search that follow
        need no read of their own."""

    def forget(self, user_id: int | None = None) -> None:
        """Drop cached accounts (of one user, or all) after a change to them;
        a read of them on its way meanwhile is not cached."""
        self._forgotten.forget(user_id)
        if user_id is None:
            self._cache.clear()
            return
        for key in [k for k, (_, rec, _) in self._cache.items() if rec.id == user_id]:
            del self._cache[key]

    async def resolve(self, msg: IncomingMessage, *, also: Also | None = None) -> UserRecord:
        return await self.resolve_account(
            msg.platform,
            msg.platform_user_id,
            display_name=msg.user_display_name,
            username=msg.user_username,
            also=also,
        )

    def known(self, msg: IncomingMessage) -> UserRecord | None:
        """The sender as `resolve` would return it, when that needs no database
        (seen here lately, nothing about the account changed); else None."""
        return self._fresh(
            msg.platform, msg.platform_user_id, msg.user_display_name, msg.user_username
        )

    def last_id(self, msg: IncomingMessage) -> int | None:
        """The user id the sender's account had when last resolved here, however
        long ago (None: not seen lately): a hint for what is written before the
        account is read again and corrected after if it changed since (the
        conversation's lease taken at intake)."""
        cached = self._cache.get((msg.platform, msg.platform_user_id))
        return None if cached is None else cached[1].id

    def _fresh(
        self,
        platform: str,
        platform_user_id: str,
        display_name: str | None,
        username: str | None,
    ) -> UserRecord | None:
        cached = self._cache.get((platform, platform_user_id))
        if (
            cached is not None
            and not _NO_CACHE
            and time.monotonic() - cached[0] < CACHE_TTL_S
            and (not display_name or display_name == cached[1].display_name)
            and (not username or username == cached[2])
        ):
            return cached[1]
        return None

    async def role_now(self, user: UserRecord) -> Role:
        """`user`'s role as known now, for a run that goes on (before its next
        LLM call): the cached account while it is fresh (a role change, made
        here, with the CLI or on another instance, drops it), else read again.
        The run's role when the account is gone or now belongs to another user
        (linked to it meanwhile)."""
        cached = self._fresh(user.platform, user.platform_user_id, None, None)
        if cached is not None:
            return cached.role if cached.id == user.id else user.role
        found = await self._find(user.platform, user.platform_user_id)
        if found is None or found.user_id != user.id:
            return user.role
        if user.handle in self._owners:
            return Role.OWNER
        return Role(found.role)

    async def resolve_account(
        self,
        platform: str,
        platform_user_id: str,
        *,
        display_name: str | None = None,
        username: str | None = None,
        also: Also | None = None,
    ) -> UserRecord:
        """The user behind a platform account, created as a guest (or owner) if
        new; `also` runs in the transaction that creates it, if one does."""
        fresh = self._fresh(platform, platform_user_id, display_name, username)
        if fresh is not None:
            return fresh
        read_at = time.monotonic()
        record = await self._load(platform, platform_user_id, display_name, username, also, read_at)
        if not self._forgotten.fresh(record.id, read_at):
            return record  # the account changed while it was read: read it again next time
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[(platform, platform_user_id)] = (read_at, record, username)
        return record

    async def _load(
        self,
        platform: str,
        platform_user_id: str,
        display_name: str | None,
        username: str | None,
        also: Also | None,
        read_at: float,
    ) -> UserRecord:
        """The account, read (or created); `read_at`: when the read began."""
        found, ids = await self._find_or_ids(platform, platform_user_id)
        if found is not None:
            read = AccountRead(
                found.user_id, found.limit_mode, found.limit_tokens, found.has_memories, read_at
            )
            for tell in self._on_read:
                tell(read)
        else:
            try:
                found = await self._create(
                    platform, platform_user_id, display_name, username, also, ids
                )
            except IntegrityError:
                # Someone created it concurrently (same person, two messages at once).
                found = await self._find(platform, platform_user_id)
                if found is None:
                    raise
        wanted_owner = f"{platform}:{platform_user_id}" in self._owners
        role = Role(found.role)
        if (
            (wanted_owner and role is not Role.OWNER)
            or (display_name and found.link_display_name != display_name)
            or (username and found.username != username)
        ):
            role = await self._refresh(found, wanted_owner, display_name, username)
        return UserRecord(
            id=found.user_id,
            role=role,
            display_name=display_name or found.link_display_name or found.user_display_name,
            platform=platform,
            platform_user_id=platform_user_id,
        )

    async def find_account(self, platform: str, platform_user_id: str) -> int | None:
        found = await self._find(platform, platform_user_id)
        return None if found is None else found.user_id

    async def _find(self, platform: str, platform_user_id: str) -> _Account | None:
        params = {"a_platform": platform, "a_user": platform_user_id}
        async with self._store.read() as session:
            row = (await execute(session, _FIND, params)).first()
        return None if row is None else _Account(*row)

    async def _find_or_ids(
        self, platform: str, platform_user_id: str
    ) -> tuple[_Account | None, tuple[int, int] | None]:
        """`_find`; on PostgreSQL, when there is no such account, with the ids
        its user and link would take (drawn from their sequences in the same
        query), so that creating it needs no id from the database."""
        if self._store.is_sqlite:
            return await self._find(platform, platform_user_id), None
        params = {"a_platform": platform, "a_user": platform_user_id}
        async with self._store.read() as session:
            row = (await execute(session, _FIND_OR_IDS, params)).one()
        if row[0] is not None:
            return _Account(*row[:_COLUMNS]), None
        return None, (int(row[_COLUMNS]), int(row[_COLUMNS + 1]))

    async def _create(
        self,
        platform: str,
        platform_user_id: str,
        display_name: str | None,
        username: str | None,
        also: Also | None = None,
        ids: tuple[int, int] | None = None,
    ) -> _Account:
        """The user, its platform link and its budget (and `also`), all or
        nothing: on SQLite one transaction of Core INSERTs (rows as column
        values: a model object costs more to make than its INSERT); on
        PostgreSQL, given the `ids` to use, one statement in autocommit, the
        three rows riding on `also`'s statement (or going alone). Raises
        `IntegrityError` (nothing written) when the link was created
        concurrently."""
        role = Role.OWNER if f"{platform}:{platform_user_id}" in self._owners else Role.GUEST
        user = new_row(User, display_name=display_name, role=role.value)
        link = new_row(
            PlatformLink,
            user_id=0,  # the new user's id, once made
            platform=platform,
            platform_user_id=platform_user_id,
            display_name=display_name,
            username=username,
        )
        if ids is not None:
            user_id, link_id = ids
            user["id"], link["id"], link["user_id"] = user_id, link_id, user_id
            async with self._store.write_one() as session:
                for row in (user, link, new_row(Budget, user_id=user_id, period=current_period())):
                    await insert_rows(session, [row], wait=False)
                committed = await also(session, user_id) if also is not None else None
        else:
            async with self._store.write() as session:
                (user_id,) = await insert_returning_ids(session, [user])
                link["user_id"] = user_id
                (link_id,) = await insert_returning_ids(session, [link])
                budget = new_row(Budget, user_id=user_id, period=current_period())
                await insert_rows(session, [budget], wait=False)  # the commit raises a failure
                committed = await also(session, user_id) if also is not None else None
        if committed is not None:
            committed()
        log.info(
            "user.created id=%s account=%s:%s role=%s", user_id, platform, platform_user_id, role
        )
        for tell in self._on_created:
            tell(user_id)
        return _Account(
            user_id, role.value, display_name, link_id, display_name, username, "role", None, False
        )

    async def _refresh(
        self,
        found: _Account,
        make_owner: bool,
        display_name: str | None,
        username: str | None,
    ) -> Role:
        async with self._store.write() as session:
            if make_owner and found.role != Role.OWNER.value:
                db_user = await session.get(User, found.user_id)
                assert db_user is not None
                db_user.role = Role.OWNER.value
                db_user.updated_at = utcnow()
                log.info("user.promoted id=%s role=owner (listed in admin.owners)", found.user_id)
            db_link = await session.get(PlatformLink, found.link_id)
            assert db_link is not None
            if display_name:
                db_link.display_name = display_name
            if username:
                db_link.username = username
        return Role.OWNER if make_owner else Role(found.role)

    async def claim_first_owner(
        self, platform: str, platform_user_id: str, display_name: str | None = None
    ) -> UserRecord | None:
        """Make this account an owner if the database has no owner yet (a fresh
        install: the operator at the machine). Returns the new owner's record, or
        None when an owner exists already (nothing changes)."""
        async with self._store.read() as session:
            owner = (
                await session.exec(select(User.id).where(User.role == Role.OWNER.value))
            ).first()
        if owner is not None:
            return None
        record = await self.resolve_account(platform, platform_user_id, display_name=display_name)
        other = aliased(User)
        async with self._store.write() as session:
            # Atomic: of two operators starting at once, one becomes the owner.
            claimed = await session.exec(
                update(User)
                .where(
                    col(User.id) == record.id,
                    ~exists().where(col(other.role) == Role.OWNER.value),
                )
                .values(role=Role.OWNER.value, updated_at=utcnow())
            )
        if claimed.rowcount != 1:
            return None
        self.forget(record.id)
        log.info("user.promoted id=%s role=owner (first owner)", record.id)
        return UserRecord(record.id, Role.OWNER, record.display_name, platform, platform_user_id)


class _Account(NamedTuple):
    """What resolving an account needs of its user and link rows."""

    user_id: int
    role: str
    user_display_name: str | None
    link_id: int
    link_display_name: str | None
    username: str | None
    limit_mode: str | None
    limit_tokens: int | None
    has_memories: bool


_COLUMNS = len(_Account._fields)

_FIND = (
    sqlalchemy.select(
        col(User.id),
        col(User.role),
        col(User.display_name),
        col(PlatformLink.id),
        col(PlatformLink.display_name),
        col(PlatformLink.username),
        col(Budget.limit_mode),
        col(Budget.limit_tokens),
        exists().where(col(Memory.user_id) == col(User.id)).label("has_memories"),
    )
    .join(PlatformLink, col(PlatformLink.user_id) == col(User.id))
    .outerjoin(Budget, col(Budget.user_id) == col(User.id))
    .where(
        col(PlatformLink.platform) == bindparam("a_platform"),
        col(PlatformLink.platform_user_id) == bindparam("a_user"),
    )
)
"""An account's user and link (`_find`), built once: it runs for every message
of someone not seen lately, a new user's first one included. The user's budget
limit and whether they have memories ride along (`AccountRead`)."""


def _find_or_ids_statement() -> Any:
    """PostgreSQL: `_FIND`'s row, or when there is none, one with NULLs and
    the next ids of users and platform_links (taken only then)."""
    found = _FIND.subquery("found")

    def next_id(table: str) -> Any:
        return func.nextval(func.pg_get_serial_sequence(table, "id"))

    missing = found.c[0].is_(None)
    return sqlalchemy.select(
        *found.c,
        case((missing, next_id("users"))).label("next_user_id"),
        case((missing, next_id("platform_links"))).label("next_link_id"),
    ).select_from(sqlalchemy.select(literal(1)).subquery("one").outerjoin(found, true()))


_FIND_OR_IDS = _find_or_ids_statement()
