"""The hot path's shortcuts keep behaviour: cached budget limits and "no
memories" answers see changes, a new user's first message creates each row
once even when many arrive at once, and the work skipped is really skipped
(statements counted on the real engine, SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, text
from sqlmodel import select

from bot.accounts import budgets as budgets_module
from bot.accounts.budgets import Budgets
from bot.store import memories as memories_module
from bot.store.memories import MemoryStore
from bot.store.models import (
    Budget,
    Conversation,
    InboxItem,
    Lease,
    OutboxItem,
    PlatformLink,
    User,
)
from tests.benchmarks.counting import only_reads
from tests.fakes.anthropic import text_reply
from tests.harness import RecordingAdapter, message

BOSS = {"admin": {"owners": ["console:boss"]}}


async def open_app(make_app, **sections):  # type: ignore[no-untyped-def]
    app = await make_app(**sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


@contextmanager
def statements(app: Any) -> Iterator[list[str]]:
    """The SQL statements the app runs inside the block."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    engines = {app.store.engine.sync_engine, app.store.urgent_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)


def account_reads(seen: list[str]) -> list[str]:
    """Queries reading an account (its platform link), whatever rides along."""
    return [s for s in seen if s.startswith(("SELECT", "WITH")) and "platform_links" in s]


def reading(seen: list[str], table: str) -> list[str]:
    """Queries reading rows of `table`: a SELECT of its columns, or a WITH
    query that only reads and reads it (or, for memories, touching it at all,
    apart from whether the user has any, read with the account)."""
    if table == "memories":
        return [s for s in seen if "memories" in s and s not in account_reads(seen)]
    return [
        s
        for s in seen
        if s.startswith(f"SELECT {table}.")
        or (s.startswith("WITH") and f"FROM {table}" in s and only_reads(s))
    ]


async def test_a_budget_changed_by_an_admin_counts_for_the_next_message(make_app, fake_anthropic):
    app, adapter = await open_app(make_app, budgets={"guest": "unlimited"}, **BOSS)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    assert (await app.pipeline.handle(message("hi again"))).status == "answered"  # cached

    boss = {"platform_user_id": "boss", "user_display_name": "Boss"}
    done = await app.pipeline.handle(message("/setbudget console:alice 1", **boss))
    assert done.status == "command" and "set" in adapter.texts[-1]
    calls = fake_anthropic.request_count
    refused = await app.pipeline.handle(message("and now?"))
    assert refused.status == "refused" and "allowance" in adapter.texts[-1]
    assert fake_anthropic.request_count == calls  # no LLM call

    await app.pipeline.handle(message("/setbudget console:alice unlimited", **boss))
    assert (await app.pipeline.handle(message("back?"))).status == "answered"


async def test_a_budget_changed_by_another_process_counts_once_the_cache_expires(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    user = await app.pipeline.s.identity.resolve(message("x"))
    # The CLI (another process): its own Budgets object on the same database.
    await Budgets(app.store, app.settings.budgets).set_limit(user.id, "fixed", 1)
    monkeypatch.setattr(budgets_module, "LIMIT_CACHE_TTL_S", 0.0)
    assert (await app.pipeline.handle(message("still?"))).status == "refused"


async def test_an_unlimited_user_without_memories_costs_no_budget_or_memory_read(
    make_app, fake_anthropic
):
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    await app.pipeline.handle(message("remember nothing"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("what about cheese"))).status == "answered"
    assert reading(seen, "budgets") == [] and reading(seen, "memories") == []
    assert reading(seen, "messages")  # a returning conversation: its history is read


async def test_a_new_users_first_message_reads_neither_budget_nor_memories(
    make_app, fake_anthropic
):
    """What a user created here has is known: its role's allowance, no memories."""
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("hello, I'm new"))).status == "answered"
    assert [s for s in seen if "INSERT INTO users" in s]  # created on the way
    assert reading(seen, "budgets") == [] and reading(seen, "memories") == []


async def test_a_new_guests_first_message_with_an_allowance_still_reads_it(
    make_app, fake_anthropic
):
    app, _ = await open_app(make_app, budgets={"guest": 50_000})
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("hello, I'm new"))).status == "answered"
    assert reading(seen, "budgets")  # a limited allowance is read (and reserved) as ever


def watch_states(conversations: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The states `conversations.state` reads from here on (it is the only
    place a run reads a conversation's history)."""
    states: list[Any] = []
    read = conversations.state

    async def state(*args: Any, **kwargs: Any) -> Any:
        states.append(await read(*args, **kwargs))
        return states[-1]

    monkeypatch.setattr(conversations, "state", state)
    return states


def texts(request: Any) -> list[str]:
    """The first text of each message of a request to the model, in order
    (a turn's context follows the user's words in a block of its own)."""
    return [
        next(b["text"] for b in m["content"] if b.get("type") == "text")
        if isinstance(m["content"], list)
        else m["content"]
        for m in request.messages
    ]


async def test_a_new_users_first_message_reads_nothing_of_the_conversation_it_creates(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    """The transaction that creates the account creates the conversation and
    takes its lease: the first run knows it is empty without a read; the next
    one reads what the first wrote."""
    app, _ = await open_app(make_app)
    states = watch_states(app.pipeline.s.conversations, monkeypatch)
    fake_anthropic.script(text_reply("hello Alice"), text_reply("you said hello"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("hello"))).status == "answered"
    assert [s for s in seen if "INSERT INTO conversations" in s]  # created on the way
    assert reading(seen, "messages") == [] and states == []
    assert texts(fake_anthropic.last_request) == ["hello"]

    with statements(app) as seen:
        assert (await app.pipeline.handle(message("what did I say?"))).status == "answered"
    assert len(reading(seen, "messages")) == 1
    assert [row.text for row in states[0].history] == ["hello", "hello Alice"]
    assert texts(fake_anthropic.last_request)[-1] == "what did I say?"


async def test_a_returning_users_new_conversation_is_read_once_and_found_empty(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    """Created in a transaction of its own, without the lease: read as every
    conversation is, in one statement, which finds no rows."""
    app, _ = await open_app(make_app)
    assert (await app.pipeline.handle(message("hello"))).status == "answered"
    states = watch_states(app.pipeline.s.conversations, monkeypatch)
    with statements(app) as seen:
        other = message("hi there", platform_channel_id="other-room")
        assert (await app.pipeline.handle(other)).status == "answered"
    assert [s for s in seen if "INSERT INTO conversations" in s]
    assert len(reading(seen, "messages")) == 1 and [s.history for s in states] == [[]]
    assert texts(fake_anthropic.last_request) == ["hi there"]


async def test_a_new_user_in_a_conversation_another_instance_created_reads_its_history(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    """A new account's transaction that finds the conversation (created by
    another instance, unknown here) does not take it for empty."""
    first, _ = await open_app(make_app)
    fake_anthropic.script(text_reply("noted, Bob"), text_reply("Bob likes tea"))
    bob = message("I like tea", platform_user_id="bob", user_display_name="Bob")
    assert (await first.pipeline.handle(bob)).status == "answered"

    second, _ = await open_app(make_app)  # another instance on the same database
    states = watch_states(second.pipeline.s.conversations, monkeypatch)
    carol = message("what does Bob like?", platform_user_id="carol", event_id="c1")
    with statements(second) as seen:
        assert (await second.pipeline.handle(carol)).status == "answered"
    assert [s for s in seen if "INSERT INTO users" in s]  # Carol is new
    assert len(reading(seen, "messages")) == 1
    assert [row.text for row in states[0].history] == ["I like tea", "noted, Bob"]
    assert "I like tea" in " ".join(texts(fake_anthropic.last_request))


async def test_a_memory_saved_here_is_recalled_at_once_and_one_saved_elsewhere_after_the_ttl(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    app, _ = await open_app(make_app)
    await app.pipeline.handle(message("hello"))
    user = await app.pipeline.s.identity.resolve(message("x"))
    here: MemoryStore = app.pipeline.s.memories
    assert await here.search(user.id, "cheese") == []  # "none" is now cached

    elsewhere = MemoryStore(app.store)  # another instance on the same database
    await elsewhere.save(user.id, "Alice likes cheese")
    assert await here.search(user.id, "cheese") == []  # within the TTL
    monkeypatch.setattr(memories_module, "NO_MEMORIES_TTL_S", 0.0)
    assert [m.text for m in await here.search(user.id, "cheese")] == ["Alice likes cheese"]

    bob = await app.pipeline.s.identity.resolve(message("x", platform_user_id="bob"))
    monkeypatch.setattr(memories_module, "NO_MEMORIES_TTL_S", 60.0)
    assert await here.search(bob.id, "tea") == []
    await here.save(bob.id, "Bob drinks tea")  # saved here: counts at once
    assert [m.text for m in await here.search(bob.id, "tea")] == ["Bob drinks tea"]


async def test_many_first_messages_of_a_new_user_at_once_create_each_row_once(
    make_app, fake_anthropic
):
    # Unlimited: how many steps the twelve take (one each, or joined into
    # fewer) depends on timing; a guest's allowance could run out on the way.
    app, adapter = await open_app(make_app, budgets={"guest": "unlimited"})
    fake_anthropic.script(*(text_reply("ok") for _ in range(12)))
    new = {"platform_user_id": "newcomer", "platform_channel_id": "fresh-room"}
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(message(f"hi {i}", event_id=f"n-{i}", **new)) for i in range(12))
    )
    assert all(o.status in ("answered", "merged") for o in outcomes), outcomes
    async with app.store.read() as s:
        links = (
            await s.exec(select(PlatformLink).where(PlatformLink.platform_user_id == "newcomer"))
        ).all()
        users = (await s.exec(select(func.count()).select_from(User))).one()
        budgets = (await s.exec(select(func.count()).select_from(Budget))).one()
        rooms = (
            await s.exec(select(Conversation).where(Conversation.channel_id == "fresh-room"))
        ).all()
        open_items = (await s.exec(select(InboxItem).where(InboxItem.state != "answered"))).all()
        leases = (await s.exec(select(Lease))).all()
    assert len(links) == 1 and users == 1 and budgets == 1  # no orphan user or budget
    assert len(rooms) == 1
    assert open_items == [] and leases == []  # every message answered, the lease handed back
    assert len(adapter.sent) >= 1


@pytest.mark.fast_path  # PostgreSQL: one statement (parts kept back and combined)
async def test_a_new_users_account_and_conversation_are_one_transaction(make_app, fake_anthropic):
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("hello, I'm new"))).status == "answered"
    first = next(i for i, s in enumerate(seen) if "INSERT INTO users" in s)
    room = next(i for i, s in enumerate(seen) if "INSERT INTO conversations" in s)
    lease = next(i for i, s in enumerate(seen) if "INSERT INTO leases" in s)
    if app.store.is_sqlite:  # intake; the account, conversation and lease; the turn; delivery
        assert first < room < lease
        assert not [s for s in seen[first:lease] if s.startswith(("BEGIN", "COMMIT", "SELECT"))]
        assert sum(s.startswith("BEGIN") for s in seen) == 4
    else:  # the user, its link and budget, the conversation, its lease with the claim of
        # what waited: one statement, in autocommit (the ids drawn by the lookup before it)
        assert first == room == lease
        for table in ("platform_links", "budgets"):
            assert f"INSERT INTO {table}" in seen[first]
        assert "UPDATE inbox" in seen[first]
        assert "nextval" in seen[first - 1]
        assert not [s for s in seen if s.upper() in ("BEGIN", "COMMIT")]
    # A returning user's new conversation is created on its own, as ever.
    with statements(app) as seen:
        other = message("elsewhere", platform_channel_id="other-room")
        assert (await app.pipeline.handle(other)).status == "answered"
    assert [s for s in seen if "INSERT INTO conversations" in s]
    assert not [s for s in seen if "INSERT INTO users" in s]


async def test_when_the_conversation_cannot_be_written_the_new_account_is_not_either(
    make_app, fake_anthropic
):
    """The database refuses the new conversation (a trigger): the new user's
    account, written with it, is not kept either; once it takes it, the
    next message creates both."""
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    if app.store.is_sqlite:
        trigger = [
            "CREATE TRIGGER refuse_room BEFORE INSERT ON conversations"
            " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        ]
    else:
        trigger = [
            "CREATE FUNCTION refuse_room() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'disk on fire'; END $$",
            "CREATE TRIGGER refuse_room BEFORE INSERT ON conversations"
            " FOR EACH ROW EXECUTE FUNCTION refuse_room()",
        ]
    async with app.store.write() as s:
        for statement in trigger:
            await s.exec(text(statement))  # type: ignore[call-overload]
    outcome = await app.pipeline.handle(message("hello", event_id="e1"))
    assert outcome.status == "failed"
    async with app.store.read() as s:
        assert (await s.exec(select(func.count()).select_from(User))).one() == 0
        assert (await s.exec(select(func.count()).select_from(Budget))).one() == 0
    async with app.store.write() as s:
        await s.exec(
            text("DROP TRIGGER refuse_room" + ("" if app.store.is_sqlite else " ON conversations"))
        )  # type: ignore[call-overload]
    again = await app.pipeline.handle(message("hello again", event_id="e2"))
    assert again.status == "answered"
    async with app.store.read() as s:
        assert len((await s.exec(select(User))).all()) == 1
        assert len((await s.exec(select(Conversation))).all()) == 1


async def test_a_new_users_first_command_creates_no_conversation(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    assert (await app.pipeline.handle(message("/help"))).status == "command"
    async with app.store.read() as s:
        assert len((await s.exec(select(User))).all()) == 1
        assert (await s.exec(select(Conversation))).all() == []


async def test_a_returning_message_takes_three_write_transactions(make_app, fake_anthropic):
    """Intake with the conversation's lease and what waits for it; the turn with
    its replies in the outbox; how the delivery ended with the lease's release."""
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    await app.pipeline.handle(message("hi"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
    writes = [s for s in seen if s.startswith(("INSERT", "UPDATE", "DELETE"))]
    if app.store.is_sqlite:
        assert sum(s.startswith("BEGIN") for s in seen) == 3
    assert len(writes) <= 13  # the turn's rows: one INSERT per table
    async with app.store.read() as s:
        states = (await s.exec(select(OutboxItem.state))).all()
        leases = (await s.exec(select(Lease))).all()
    assert states == ["sent", "sent"] and leases == []


async def test_when_nothing_waits_for_the_conversation_no_claim_is_run(make_app, fake_anthropic):
    """Taking the conversation's lease at intake and freeing it after the run
    each ask, in the same statement, whether messages wait for it: with none
    waiting, no claim of the inbox's waiting messages runs (the messages
    another instance leaves are taken: `test_early_lease`, `test_hand_back`)."""
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    if not app.store.is_sqlite:
        pytest.skip("PostgreSQL joins the claim to the lease's statements")
    await app.pipeline.handle(message("hi"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
    claims = [s for s in seen if s.startswith("UPDATE inbox SET state=") and "RETURNING" in s]
    lease = [s for s in seen if s.startswith(("INSERT INTO leases", "DELETE FROM leases"))]
    assert claims == [] and len(lease) == 2
    assert all("EXISTS (SELECT" in s for s in lease)


async def test_whether_an_earlier_message_is_unfinished_costs_no_read_of_its_own(
    make_app, fake_anthropic
):
    """A run must not start while an earlier message of its conversation is
    open on another instance (`test_order_after_takeover`): the statement
    taking the conversation's lease asks it, at intake or before the run of
    a message that took no lease at intake; no query of the inbox runs."""
    app, _ = await open_app(make_app, budgets={"guest": "unlimited"})
    await app.pipeline.handle(message("hi"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
        app.pipeline.s.identity.forget()  # not seen lately: no lease at intake
        assert (await app.pipeline.handle(message("and again"))).status == "answered"
    assert [s for s in seen if s.startswith("SELECT") and "FROM inbox" in s] == []
    assert sum("EXISTS (SELECT" in s and "lease_owner !=" in s for s in seen) == 2


async def test_when_the_closing_transaction_fails_the_delivery_is_still_recorded(
    make_app, fake_anthropic, monkeypatch: pytest.MonkeyPatch
):
    """The database fails the run's last transaction (delivery end, pending
    claim, lease release): the reply is marked sent on its own and the lease
    freed, so nothing is sent twice and the conversation is not blocked."""
    app, adapter = await open_app(make_app)
    leases = app.pipeline.s.leases
    release = leases.release

    async def failing(held: Any, session: Any = None) -> None:
        if session is not None:
            raise ConnectionError("database cut")
        await release(held)

    monkeypatch.setattr(leases, "release", failing)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    async with app.store.read() as s:
        rows = (await s.exec(select(OutboxItem))).all()
        held = (await s.exec(select(Lease))).all()
    assert [(r.state, r.attempts) for r in rows] == [("sent", 1)] and held == []
    assert len(adapter.sent) == 1
    assert (await app.pipeline.handle(message("next"))).status == "answered"


class PartsAdapter(RecordingAdapter):
    """Posts each reply in `parts` parts and reports every one, as the real
    adapters do; before posting a part, notes what the outbox row records."""

    def __init__(self, app: Any, parts: int) -> None:
        super().__init__()
        self.app = app
        self.parts = parts
        self.recorded_before: list[list[str]] = []

    async def send(self, reply: Any, progress: Any = None) -> list[str]:
        ids = list(progress.done) if progress is not None else []
        for index in range(len(ids), self.parts):
            async with self.app.store.read() as s:
                newest = select(OutboxItem.part_ids).order_by(OutboxItem.id.desc()).limit(1)  # type: ignore[union-attr]
                self.recorded_before.append(list((await s.exec(newest)).one() or []))
            ids.append(f"p{index + 1}")
            if progress is not None:
                await progress.sent(index, ids[-1], last=index == self.parts - 1)
        self.sent.append(reply)
        return ids


async def test_each_part_is_recorded_before_the_next_goes_out_and_the_last_with_the_end(
    make_app, fake_anthropic
):
    """A crash while part 3 goes out must not repeat parts 1 and 2: they are
    recorded as they go. The last part is recorded by the delivery's end."""
    app = await make_app()
    adapter = PartsAdapter(app, parts=3)
    app.attach(adapter)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    assert adapter.recorded_before == [[], ["p1"], ["p1", "p2"]]
    async with app.store.read() as s:
        row = (await s.exec(select(OutboxItem))).one()
    assert (row.state, row.part_ids) == ("sent", ["p1", "p2", "p3"])


async def test_a_reply_in_one_part_costs_no_write_of_its_own_for_the_part(make_app, fake_anthropic):
    """An adapter reporting its one part: still three write transactions (the
    part's id is written with the delivery's end, the very next write)."""
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = PartsAdapter(app, parts=1)
    app.attach(adapter)
    await app.pipeline.handle(message("hi"))
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
    updates = [s for s in seen if "UPDATE outbox" in s]  # (PostgreSQL: in a combined write)
    assert len(updates) == 1  # the end, carrying the part
    if app.store.is_sqlite:
        assert sum(s.startswith("BEGIN") for s in seen) == 3
    async with app.store.read() as s:
        rows = (await s.exec(select(OutboxItem).order_by(OutboxItem.id))).all()  # type: ignore[arg-type]
    assert [(r.state, r.part_ids) for r in rows] == [("sent", ["p1"]), ("sent", ["p1"])]
