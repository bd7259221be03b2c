"""Writing a finished turn, whatever the database does.

`TurnWriter.save` commits the turn (`bot.pipeline.turns`), retrying with
backoff while the database is unavailable (a retry first looks whether the
failed attempt did commit, its answer lost on the way back: then the turn is
taken as stored, its replies sent from the outbox). A turn that still cannot
be written is kept in the `Spool`, a local file of one JSON line per turn, and
written when the database is back (`replay`, from the recovery sweep): the
conversation keeps the turn and the budget is charged what the run spent. Replaying is idempotent
(a run id already stored is skipped). Attachments' bytes are not spooled.

A turn whose messages another instance took over (`LeaseLost`) is not saved:
that instance answers them."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel, col, select

from bot.accounts.budgets import Budgets
from bot.config import Price
from bot.pipeline.outbox import Outbox, Outgoing
from bot.pipeline.turns import LeaseLost, TurnRecord, TurnRows, TurnSaved, turn_rows, write_turn
from bot.store import Store
from bot.store.models import Message, OutboxItem, Run, TokenLog, TraceSpan
from bot.store.rows import NewRow, as_new_row
from bot.types import Reply, Role

log = logging.getLogger("switchboard.spool")


class Spool:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def put(self, rows: TurnRows) -> None:
        """Append one turn, durably (fsync). Raises OSError when it cannot."""
        line = json.dumps(_dump(rows), separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def pending(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    async def replay(self, store: Store, budgets: Budgets) -> int:
        """Write every spooled turn; the ones that still fail stay. Returns how
        many were written."""
        async with self._lock:
            if not self.pending():
                return 0
            lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
            kept: list[str] = []
            written = 0
            for line in lines:
                try:
                    rows = _load(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    log.error("spool.unreadable line dropped: %.200s", line)
                    continue
                try:
                    async with store.write() as session:
                        await write_turn(session, rows, budgets)
                    written += 1
                    log.info("spool.replayed run=%s", rows.run["id"])
                except IntegrityError:
                    log.info("spool.already_stored run=%s", rows.run["id"])
                except Exception as exc:
                    log.warning("spool.replay_failed run=%s: %s", rows.run["id"], exc)
                    kept.append(line)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(f"{ln}\n" for ln in kept))
            os.chmod(tmp, 0o600)
            tmp.replace(self.path)
            return written


def _dump(rows: TurnRows) -> dict[str, Any]:
    return {
        "run": Run.model_validate(dict(rows.run)).model_dump(mode="json"),
        "messages": [_json(Message, m) for m in rows.messages],
        "spans": [_json(TraceSpan, s) for s in rows.spans],
        "tokens": [_json(TokenLog, t) for t in rows.tokens],
        "user_id": rows.user_id,
        "role": rows.role.value,
        "platform": rows.platform,
        "inbox_keys": rows.inbox_keys,
        "inbox_state": rows.inbox_state,
        "error": rows.error,
        "owed": rows.owed,
        "holds": rows.release_holds,
    }


def _json(model: type[SQLModel], row: NewRow) -> dict[str, Any]:
    """A row as the spool stores it: the model's JSON, without its database id."""
    return model.model_validate(dict(row)).model_dump(mode="json", exclude={"id"})


def _load(data: dict[str, Any]) -> TurnRows:
    role = Role(data["role"])
    user_id = int(data["user_id"])
    return TurnRows(
        run=as_new_row(Run.model_validate(data["run"])),
        messages=[as_new_row(Message.model_validate(m)) for m in data["messages"]],
        files=[],
        spans=[as_new_row(TraceSpan.model_validate(s)) for s in data["spans"]],
        tokens=[as_new_row(TokenLog.model_validate(t)) for t in data["tokens"]],
        user_id=user_id,
        role=role,
        platform=data["platform"],
        inbox_keys=list(data["inbox_keys"]),
        inbox_state=data["inbox_state"],
        error=data["error"],
        # ([held, tokens] pairs: a line of a version whose holds were a counter)
        owed=[int(item[1] if isinstance(item, list) else item) for item in data["owed"]],
        release_holds=bool(data.get("holds", False)),
    )


@dataclass(frozen=True, slots=True)
class Saved:
    """How saving a turn ended: `turn` when committed; `spooled` when it waits in
    the spool (send the replies as they are); neither when the turn is not ours."""

    turn: TurnSaved | None = None
    spooled: bool = False


class TurnWriter:
    def __init__(
        self,
        store: Store,
        budgets: Budgets,
        outbox: Outbox,
        spool: Spool,
        prices: Mapping[str, Price],
        retry_seconds: float,
    ) -> None:
        self._store = store
        self._budgets = budgets
        self._outbox = outbox
        self.spool = spool
        self._prices = prices
        self._retry_seconds = retry_seconds

    async def save(self, turn: TurnRecord, *, retry_seconds: float | None = None) -> Saved:
        rows = turn_rows(turn, self._prices)
        deadline = time.monotonic() + (
            self._retry_seconds if retry_seconds is None else retry_seconds
        )
        delay = 0.25
        failed = False
        while True:
            try:
                if failed and (stored := await self._stored(rows, turn.replies)) is not None:
                    return Saved(stored)
                return Saved(await self._write(rows, turn.replies))
            except LeaseLost as exc:
                log.warning("run.lease_lost run=%s: %s; not saved, not sent", turn.run_id, exc)
                return Saved()
            except Exception as exc:
                if time.monotonic() + delay > deadline:
                    log.error("run.not_saved run=%s: %s; spooling the turn", turn.run_id, exc)
                    break
                log.warning("run.save_retry run=%s in=%.2fs: %s", turn.run_id, delay, exc)
                failed = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        try:
            self.spool.put(rows)
        except OSError:
            log.exception("spool.write_failed run=%s: the turn is lost", turn.run_id)
        return Saved(spooled=True)

    async def _stored(self, rows: TurnRows, replies: Sequence[Reply]) -> TurnSaved | None:
        """Before trying again: the turn as stored when a failed attempt did
        commit (the database's answer was lost on the way back), so that the
        retry neither fails on what is there nor leaves its replies unsent in
        the outbox; None when it is not stored."""
        run_id = rows.run["id"]
        async with self._store.read() as session:
            if (await session.exec(select(Run.id).where(Run.id == run_id))).first() is None:
                return None
            ids = (
                await session.exec(
                    select(OutboxItem.id)
                    .where(OutboxItem.run_id == run_id)
                    .order_by(col(OutboxItem.id))
                )
            ).all()
        log.warning("run.saved_before run=%s: the attempt that failed had committed", run_id)
        outgoing = [Outgoing(int(i or 0), reply) for i, reply in zip(ids, replies, strict=False)]
        return TurnSaved(None, len(rows.messages), outgoing)

    async def _write(self, rows: TurnRows, replies: Sequence[Reply]) -> TurnSaved:
        """Commit the turn in one transaction (on PostgreSQL a live turn's
        statements as one: `write_turn`'s `at_once`)."""
        async with self._store.write() as session:
            saved = await write_turn(
                session,
                rows,
                self._budgets,
                self._outbox,
                replies,
                at_once=self._store.combines,
            )
        if rows.release_holds:  # a message here may wait for them
            self._budgets.releases.wake(rows.user_id)
        return saved
