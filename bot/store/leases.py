"""Named leases in the database: one holder at a time across every instance.

`acquire` is one atomic upsert: it inserts the lease, or takes it over when it
is expired or already ours, and returns a fresh token; anything else (held by
a live instance) returns None. `renew` extends everything this instance holds
in one statement and reports the leases someone asked to stop. `release`
frees a lease only if the token still matches, so releasing an older take
never frees a newer one. SQLite and PostgreSQL share the code (both have
`INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, delete, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.store.db import Store
from bot.store.models import Lease
from bot.store.rows import Write, execute
from bot.types import utcnow


@dataclass(frozen=True, slots=True)
class Held:
    name: str
    token: str


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    name: str
    owner: str
    expires_at: Any
    user_id: int | None
    run_id: str | None
    stop_requested_by: str | None


class Leases:
    def __init__(self, store: Store, owner: str, lease_seconds: float) -> None:
        self._store = store
        self.owner = owner
        self.lease = timedelta(seconds=lease_seconds)
        self._acquire: Any = None
        self._also: dict[int, tuple[Any, Any, Any]] = {}

    async def acquire(
        self,
        name: str,
        *,
        seconds: float | None = None,
        user_id: int | None = None,
        run_id: str | None = None,
        session: AsyncSession | None = None,
    ) -> Held | None:
        """Take `name` (in `session`'s transaction when given); None when a live
        instance holds it."""
        (statement, params), held = self.acquiring(
            name, seconds=seconds, user_id=user_id, run_id=run_id
        )
        if session is None:
            async with self._store.write() as own:
                row = (await execute(own, statement, params)).first()
        else:
            row = (await execute(session, statement, params)).first()
        return held if row is not None else None

    def acquiring(
        self,
        name: str,
        *,
        seconds: float | None = None,
        user_id: int | None = None,
        run_id: str | None = None,
        also: Any = None,
    ) -> tuple[Write, Held]:
        """`acquire`'s statement and parameters, for a caller's combined write
        (it returns the lease's token when taken, no row when not; and `also`,
        a column expression or a tuple of them, after it when given), and the
        lease it takes then."""
        now = utcnow()
        expires = now + (self.lease if seconds is None else timedelta(seconds=seconds))
        token = secrets.token_hex(8)
        params = {
            "l_name": name,
            "l_owner": self.owner,
            "l_token": token,
            "l_expires_at": expires,
            "l_user_id": user_id,
            "l_run_id": run_id,
            "l_now": now,
        }
        if also is not None:
            return (self._returning(also)[0], params), Held(name, token)
        if self._acquire is None:
            self._acquire = _acquire_statement(self._store.dialect)
        return (self._acquire, params), Held(name, token)

    def _returning(self, also: Any) -> tuple[Any, Any]:
        """The upsert and the release returning `also` too, built once for it
        (afresh: `returning()` on a statement already compiled keeps its
        memoized columns, without the new one)."""
        known = self._also.get(id(also))
        if known is None or known[0] is not also:
            known = (
                also,
                _acquire_statement(self._store.dialect, also),
                _release_statement().returning(*_columns(also)),
            )
            self._also[id(also)] = known
        return known[1], known[2]

    async def release(self, held: Held) -> None:
        """Free `held`, in a transaction of its own (after a run,
        `bot.pipeline.hand_back` writes it with the rest, `releasing`)."""
        async with self._store.write() as session:
            await execute(session, *self.releasing(held))

    def releasing(self, held: Held, also: Any = None) -> Write:
        """`release`'s statement and parameters, for a caller's combined write;
        with `also`, it returns that column expression (no row: the lease was
        no longer `held`)."""
        statement = _RELEASE if also is None else self._returning(also)[1]
        return statement, {"l_name": held.name, "l_token": held.token}

    async def relabel(self, held: Held, user_id: int) -> None:
        """Record `user_id` as the one `held` runs for (who may stop it)."""
        async with self._store.write() as session:
            params = {"l_name": held.name, "l_token": held.token, "l_user_id": user_id}
            await execute(session, _RELABEL, params)

    async def renew(self) -> list[str]:
        """Extend this instance's leases; returns the ones asked to stop."""
        async with self._store.write_urgent() as session:
            rows = await session.exec(
                update(Lease)
                .where(col(Lease.owner) == self.owner, col(Lease.expires_at) >= utcnow())
                .values(expires_at=utcnow() + self.lease)
                .returning(col(Lease.name), col(Lease.stop_requested_by))
            )
            return [name for name, stop in rows.all() if stop]

    async def release_all(self) -> int:
        """Free everything this instance holds (shutdown)."""
        async with self._store.write() as session:
            result = await session.exec(delete(Lease).where(col(Lease.owner) == self.owner))
        return int(result.rowcount or 0)

    async def get(self, name: str) -> LeaseInfo | None:
        async with self._store.read() as session:
            row = (
                await session.exec(
                    select(Lease).where(col(Lease.name) == name, col(Lease.expires_at) >= utcnow())
                )
            ).first()
        return None if row is None else _info(row)

    async def request_stop(self, name: str, by: str) -> LeaseInfo | None:
        """Ask the live holder of `name` to stop; its info, or None if nobody holds it."""
        async with self._store.write() as session:
            row = (
                await session.exec(
                    update(Lease)
                    .where(col(Lease.name) == name, col(Lease.expires_at) >= utcnow())
                    .values(stop_requested_by=by)
                    .returning(Lease)
                )
            ).first()
        return None if row is None else _info(row[0])

    async def listing(self, prefix: str = "") -> Sequence[LeaseInfo]:
        async with self._store.read() as session:
            rows = await session.exec(
                select(Lease)
                .where(col(Lease.name).startswith(prefix), col(Lease.expires_at) >= utcnow())
                .order_by(col(Lease.name))
            )
            return [_info(r) for r in rows.all()]

    async def forget_expired(self, older_than: timedelta = timedelta(hours=1)) -> int:
        async with self._store.write() as session:
            result = await session.exec(
                delete(Lease).where(col(Lease.expires_at) < utcnow() - older_than)
            )
        return int(result.rowcount or 0)


def _info(row: Lease) -> LeaseInfo:
    return LeaseInfo(
        row.name, row.owner, row.expires_at, row.user_id, row.run_id, row.stop_requested_by
    )


def _acquire_statement(dialect: str, also: Any = None) -> Any:
    """The upsert of `acquire`, built once (with bind parameters): insert the
    lease, or take it over when it is ours or expired; RETURNING says whether."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    values: dict[str, Any] = {
        "name": bindparam("l_name"),
        "owner": bindparam("l_owner"),
        "token": bindparam("l_token"),
        "expires_at": bindparam("l_expires_at"),
        "user_id": bindparam("l_user_id"),
        "run_id": bindparam("l_run_id"),
        "stop_requested_by": None,
        "acquired_at": bindparam("l_now"),
    }
    base = insert(Lease).values(**values)
    return base.on_conflict_do_update(
        index_elements=[col(Lease.name)],
        set_={k: base.excluded[k] for k in values if k != "name"},
        where=(col(Lease.owner) == bindparam("l_owner"))
        | (col(Lease.expires_at) < bindparam("l_now")),
    ).returning(col(Lease.token), *_columns(also))


def _columns(also: Any) -> tuple[Any, ...]:
    """`also` as the columns it adds to a RETURNING."""
    if also is None:
        return ()
    return also if isinstance(also, tuple) else (also,)


def _release_statement() -> Any:
    return delete(Lease).where(
        col(Lease.name) == bindparam("l_name"), col(Lease.token) == bindparam("l_token")
    )


_RELEASE = _release_statement()
_RELABEL = (
    update(Lease)
    .where(col(Lease.name) == bindparam("l_name"), col(Lease.token) == bindparam("l_token"))
    .values(user_id=bindparam("l_user_id"))
)
