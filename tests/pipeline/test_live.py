"""Streamed replies through the real pipeline and SDK against the fake API: what
the live view is shown while the model writes, and the final reply that
replaces it. The platform side (drafts, edits, native streams) is tested per
adapter against the fake platform servers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import select

from bot.errors import RateLimited
from bot.pipeline.intake import Inbox, with_event_id
from bot.pipeline.live import INTERRUPTED_NOTE, STOPPED_MARK
from bot.store.models import InboxItem
from bot.types import Target, utcnow
from tests.fakes.anthropic import stream_error, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool
from tests.waiting import wait_until


@dataclass
class Live:
    """A `LiveMessage` that records what it was asked to show."""

    target: Target
    updates: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    posted: list[str] = field(default_factory=list)
    closed: bool = False
    discarded: bool = False
    fail_with: list[BaseException] = field(default_factory=list)

    async def update(self, text: str) -> None:
        if self.fail_with:
            raise self.fail_with.pop(0)
        self.updates.append(text)
        self.times.append(time.monotonic())
        if not self.posted:
            self.posted.append("m1")

    def drafts(self) -> tuple[str, ...]:
        return tuple(self.posted)

    async def close(self) -> None:
        self.closed = True

    async def discard(self) -> None:
        self.discarded = True


@dataclass
class StreamingAdapter(RecordingAdapter):
    lives: list[Live] = field(default_factory=list)
    fail_first_update: list[BaseException] = field(default_factory=list)

    def open_stream(self, target: Target) -> Live:
        live = Live(target, fail_with=list(self.fail_first_update))
        self.lives.append(live)
        return live


async def start(make_app, *tools, interval: float = 0.05, **sections):  # type: ignore[no-untyped-def]
    sections.setdefault("budgets", {"guest": "unlimited"})
    sections.setdefault("streaming", {"interval_seconds": interval})
    app = await make_app(tools=tools, **sections)
    adapter = StreamingAdapter()
    app.attach(adapter)
    return app, adapter


def held_tool(name: str, result: str) -> tuple[ProbeTool, asyncio.Event]:
    """A tool that answers `result` once its gate is set (the run waits in it)."""
    gate = asyncio.Event()

    async def held(tool: ProbeTool, args: object) -> str:
        await gate.wait()
        return result

    return ProbeTool(name, held), gate


LONG = "The quick brown fox jumps over the lazy dog. " * 6


async def test_the_reply_grows_while_written_and_the_final_replaces_it(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=10, chunk_delay=0.03))
    outcome = await app.pipeline.handle(message("tell me"))

    (live,) = adapter.lives
    assert len(live.updates) >= 2, live.updates  # it grew visibly
    assert all(LONG.startswith(u) for u in live.updates)  # each a prefix of the reply
    assert [len(u) for u in live.updates] == sorted(len(u) for u in live.updates)
    assert live.closed and not live.discarded
    (final,) = adapter.sent
    assert final.text == LONG.strip() == outcome.replies[0].text
    assert final.drafts == ("m1",)  # sent as the edit of the streamed message


async def test_updates_are_throttled_to_the_interval(make_app, fake_anthropic):
    app, adapter = await start(make_app, interval=0.3)
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=4, chunk_delay=0.02))
    await app.pipeline.handle(message("tell me"))

    (live,) = adapter.lives
    gaps = [b - a for a, b in zip(live.times, live.times[1:], strict=False)]
    assert live.updates and all(gap >= 0.29 for gap in gaps), gaps


async def test_a_streamed_no_reply_shows_nothing_at_all(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply("NO_REPLY", chunk_size=1, chunk_delay=0.03))
    outcome = await app.pipeline.handle(
        message("just chatting", chat_type="group", mentions_bot=True)
    )

    assert outcome.status == "silent"
    (live,) = adapter.lives
    assert live.updates == [] and adapter.sent == []


async def test_reasoning_and_text_tool_calls_never_flash(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    text = (
        "<think>the secret plan</think>Here is the answer.\n"
        'Tool call: delete_everything {"now": true}\nAnd more.'
    )
    fake_anthropic.script(text_reply(text, chunk_size=3, chunk_delay=0.01))
    await app.pipeline.handle(message("q"))

    (live,) = adapter.lives
    shown = "\n".join(live.updates)
    assert "secret" not in shown and "delete_everything" not in shown and "<" not in shown
    assert "secret" not in adapter.sent[0].text


async def test_a_tool_shows_as_a_status_line_the_final_text_replaces(make_app, fake_anthropic):
    tool, gate = held_tool("lookup", "found it")
    app, adapter = await start(make_app, tool)
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Let me look that up."),
        text_reply("It is 42.", chunk_size=4, chunk_delay=0.01),
    )
    running = asyncio.create_task(app.pipeline.handle(message("what is it?")))
    await wait_until(
        lambda: bool(adapter.lives) and any("lookup" in u for u in adapter.lives[0].updates)
    )
    gate.set()
    await running

    (live,) = adapter.lives
    assert "Let me look that up.\n\n_using lookup…_" in live.updates
    assert [r.text for r in adapter.sent] == ["It is 42."]
    assert adapter.sent[0].drafts == ("m1",)


async def test_stop_mid_stream_leaves_the_partial_text_marked(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=5, chunk_delay=0.05))
    running = asyncio.create_task(app.pipeline.handle(message("write an essay")))
    await wait_until(lambda: bool(adapter.lives) and bool(adapter.lives[0].updates))
    stopped = await app.pipeline.handle(message("/stop"))
    outcome = await running

    assert stopped.replies[0].text == "Stopped." and outcome.status == "cancelled"
    partial = next(r for r in adapter.sent if r.drafts)
    assert partial.text.endswith(STOPPED_MARK)
    assert LONG.startswith(partial.text.removesuffix(STOPPED_MARK).rstrip())
    assert partial.drafts == ("m1",)


async def test_a_provider_error_mid_stream_ends_in_an_error_line(make_app, fake_anthropic):
    app, adapter = await start(make_app, llm={"max_retries": 0})
    fake_anthropic.script(
        stream_error("api_error", "boom", partial_text="Half of an ans"),
        stream_error("api_error", "boom", partial_text="Half of an ans"),
        stream_error("api_error", "boom", partial_text="Half of an ans"),
    )
    outcome = await app.pipeline.handle(message("q"))

    assert outcome.status == "failed"
    (final,) = adapter.sent
    assert final.kind == "error" and final.drafts == adapter.lives[0].drafts()


async def test_rate_limited_updates_pause_and_the_final_still_lands(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    adapter.fail_first_update = [RateLimited("slow down", retry_after=0.2)]
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=6, chunk_delay=0.02))
    await app.pipeline.handle(message("q"))

    (live,) = adapter.lives
    assert live.updates  # resumed after the pause
    assert [r.text for r in adapter.sent] == [LONG.strip()]


async def test_a_broken_live_view_does_not_break_the_reply(make_app, fake_anthropic, caplog):
    app, adapter = await start(make_app)
    adapter.fail_first_update = [RuntimeError("platform hiccup")]
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=6, chunk_delay=0.02))
    outcome = await app.pipeline.handle(message("q"))

    assert outcome.status == "answered"
    assert adapter.lives[0].updates == []  # the live view ended at the failure
    assert [r.text for r in adapter.sent] == [LONG.strip()]
    assert "stream.update_failed" in caplog.text


async def test_text_then_silence_removes_what_was_shown(make_app, fake_anthropic):
    tool, gate = held_tool("lookup", "nothing relevant")
    app, adapter = await start(make_app, tool)
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Checking."),
        text_reply("NO_REPLY"),
    )
    running = asyncio.create_task(
        app.pipeline.handle(message("hm", chat_type="group", mentions_bot=True))
    )
    await wait_until(lambda: bool(adapter.lives) and bool(adapter.lives[0].updates))
    gate.set()
    assert (await running).status == "silent"
    assert adapter.lives[0].discarded and adapter.sent == []


async def test_streaming_can_be_turned_off_per_platform(make_app, fake_anthropic):
    app, adapter = await start(make_app, streaming={"console": {"enabled": False}})
    fake_anthropic.script(text_reply("Whole.", chunk_size=2, chunk_delay=0.01))
    await app.pipeline.handle(message("q"))
    assert adapter.lives == [] and [r.text for r in adapter.sent] == ["Whole."]
    assert adapter.sent[0].drafts == ()


async def test_posted_drafts_are_recorded_on_the_inbox_row(make_app, fake_anthropic):
    app, adapter = await start(make_app)
    fake_anthropic.script(text_reply(LONG.strip(), chunk_size=10, chunk_delay=0.03))
    await app.pipeline.handle(message("tell me", event_id="ev-1"))
    assert adapter.sent[0].drafts == ("m1",)

    async with app.store.read() as session:
        row = (await session.exec(select(InboxItem))).one()
    assert row.drafts == ["m1"]  # what a takeover would close had we died


async def test_a_takeover_closes_what_the_dead_run_had_posted(make_app, fake_anthropic):
    app, adapter = await start(make_app, inbox={"sweep_seconds": 0.1})
    msg = with_event_id(message("tell me", event_id="ev-2"))
    # A process took the message, streamed part of its answer, and died.
    dead = Inbox(app.store, owner="dead-instance", lease_seconds=20)
    assert await dead.accept(msg)
    await dead.record_drafts("console", "ev-2", ["m7", "m8"])
    async with app.store.write() as session:
        await session.exec(update(InboxItem).values(lease_expires_at=utcnow() - timedelta(1)))
    fake_anthropic.script(text_reply("The answer, again.", chunk_size=4, chunk_delay=0.01))
    app.start_recovery(["console"])

    await wait_until(lambda: len(adapter.sent) == 2)
    note, answer = sorted(adapter.sent, key=lambda r: r.kind != "notice")
    assert note.text == INTERRUPTED_NOTE and note.drafts == ("m7", "m8")
    assert answer.text == "The answer, again." and answer.drafts == ("m1",)
    async with app.store.read() as session:
        row = (await session.exec(select(InboxItem))).one()
    assert row.state == "answered"


async def test_a_reply_done_within_an_interval_is_just_sent_whole(make_app, fake_anthropic):
    app, adapter = await start(make_app, interval=5.0)
    fake_anthropic.script(text_reply("Quick one.", chunk_size=2))
    await app.pipeline.handle(message("q"))

    (live,) = adapter.lives
    assert live.updates == [] and not live.discarded
    assert [(r.text, r.drafts) for r in adapter.sent] == [("Quick one.", ())]


async def test_an_update_refused_by_a_rate_limit_is_tried_again(make_app, fake_anthropic):
    tool, gate = held_tool("lookup", "done")
    app, adapter = await start(make_app, tool)
    adapter.fail_first_update = [RateLimited("slow down", retry_after=0.1)]
    fake_anthropic.script(
        tool_use_reply(tool_call("lookup"), text="Working on it."),
        text_reply("Done."),
    )
    running = asyncio.create_task(app.pipeline.handle(message("go")))
    # No new text arrives while the tool runs: the refused text still gets shown.
    await wait_until(lambda: bool(adapter.lives) and bool(adapter.lives[0].updates))
    gate.set()
    await running
    assert adapter.lives[0].updates[0].startswith("Working on it.")


async def test_an_answer_in_is_not_drafted_while_its_run_waits_for_its_turn(
    make_app, fake_anthropic
):
    """Under load (one message at work at a time here), a run whose model has
    answered waits for its slot back: its text is not drafted meanwhile (the
    final reply follows it; the update would only cost a platform call)."""
    tool, gate = held_tool("lookup", "found")
    app, adapter = await start(make_app, tool, interval=0.2, inbox={"max_busy": 1})
    fake_anthropic.script(
        text_reply("Quick one.", delay=0.3),  # the first message's answer
        tool_use_reply(tool_call("lookup")),  # the second's: it holds the slot in the tool
        text_reply("Found."),
    )
    first = asyncio.create_task(app.pipeline.handle(message("q", platform_channel_id="a")))
    await wait_until(lambda: fake_anthropic.request_count == 1)  # in the model: slot free
    second = asyncio.create_task(
        app.pipeline.handle(message("look", platform_user_id="bob", platform_channel_id="b"))
    )
    await wait_until(lambda: tool.calls)  # the second message holds the only slot
    await asyncio.sleep(1.0)  # the first's answer is in, well past the interval
    assert adapter.lives[0].target.channel_id == "a"
    assert adapter.lives[0].updates == []  # not drafted while it waits

    gate.set()
    assert (await first).status == "answered" and (await second).status == "answered"
    first_reply = next(r for r in adapter.sent if r.target.channel_id == "a")
    assert (first_reply.text, first_reply.drafts) == ("Quick one.", ())


async def test_what_was_held_back_is_shown_once_the_run_goes_on(make_app, fake_anthropic):
    """The text held back while the run waited for its slot is shown once the
    run has it back and goes on (here: into a long tool)."""
    lookup, lookup_gate = held_tool("lookup", "found")
    fetch, fetch_gate = held_tool("fetch", "fetched")
    app, adapter = await start(make_app, lookup, fetch, interval=0.2, inbox={"max_busy": 1})
    fake_anthropic.script(
        tool_use_reply(tool_call("fetch"), text="Checking.", delay=0.3),  # the first message
        tool_use_reply(tool_call("lookup")),  # the second's: it holds the slot in the tool
        text_reply("Found."),
        text_reply("Fetched."),
    )
    first = asyncio.create_task(app.pipeline.handle(message("q", platform_channel_id="a")))
    await wait_until(lambda: fake_anthropic.request_count == 1)
    second = asyncio.create_task(
        app.pipeline.handle(message("look", platform_user_id="bob", platform_channel_id="b"))
    )
    await wait_until(lambda: lookup.calls)
    await asyncio.sleep(0.8)
    (live, *_) = adapter.lives
    assert live.target.channel_id == "a" and live.updates == []  # held back

    lookup_gate.set()  # the slot frees: the first run goes on, into its tool
    await wait_until(lambda: fetch.calls and live.updates)
    assert live.updates[0].startswith("Checking.")
    fetch_gate.set()
    assert (await first).status == "answered" and (await second).status == "answered"
