"""The schedule tools through the real agent loop (the fake model calls them),
and persona heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.accounts.directory import Directory
from bot.types import Role
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import message
from tests.scheduling.rig import FakeClock, job, started


async def make_user(app: Any, role: Role, **fields: Any) -> int:
    user = await app.pipeline.s.identity.resolve(message("-", **fields))
    await Directory(app.store, app.pipeline.s.identity).set_role(user.id, role)
    return int(user.id)


def tool_results(request: Any) -> list[dict[str, Any]]:
    return [b for b in request.messages[-1]["content"] if b["type"] == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else " ".join(c["text"] for c in content)


async def test_the_agent_schedules_a_cron_wakeup_that_then_fires(make_app, fake_anthropic):
    clock = FakeClock()
    app, adapter = await started(make_app, clock)
    alice = await make_user(app, Role.USER)
    fake_anthropic.script(
        tool_use_reply(
            tool_call(
                "schedule_add",
                {
                    "prompt": "Post the stand-up reminder",
                    "when": "0 9 * * MON-FRI",
                    "timezone": "Europe/Paris",
                },
            )
        ),
        text_reply("Done: weekdays at 9."),
    )
    outcome = await app.pipeline.handle(message("remind us every weekday at 9"))
    assert outcome.status == "answered"
    (result,) = tool_results(fake_anthropic.last_request)
    assert not result.get("is_error")
    assert result_text(result) == (
        "Scheduled wakeup #1: cron 0 9 * * MON-FRI (Europe/Paris); next run "
        "2026-11-23 09:00 CET (Europe/Paris). It will post in this conversation."
    )
    created = await job(app, 1)
    assert (created.owner_user_id, created.trigger_kind, created.timezone) == (
        alice,
        "cron",
        "Europe/Paris",
    )
    assert app.scheduler.next_fire(1) == datetime(2026, 11, 23, 8, tzinfo=UTC)

    clock.now = datetime(2026, 11, 23, 8, tzinfo=UTC)
    fake_anthropic.script("Stand-up in 5 minutes!")
    assert await app.scheduler.run_due() == {1: "answered"}
    assert adapter.texts[-1] == "Stand-up in 5 minutes!"
    wakeup = fake_anthropic.last_request.messages[-1]["content"][0]["text"]
    assert "Post the stand-up reminder" in wakeup and "Scheduled wakeup #1" in wakeup


async def test_a_bad_cron_is_a_tool_error_the_agent_corrects(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    await make_user(app, Role.USER)
    fake_anthropic.script(
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "0 9 * * MON-FRY"})),
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "0 9 * * MON-FRI"})),
        text_reply("Scheduled."),
    )
    assert (await app.pipeline.handle(message("every weekday at 9"))).status == "answered"
    first = tool_results(fake_anthropic.requests[1])[0]
    assert first["is_error"] is True
    assert "invalid cron expression '0 9 * * MON-FRY': unknown day-of-week 'fry'" in result_text(
        first
    )
    second = tool_results(fake_anthropic.requests[2])[0]
    assert not second.get("is_error") and "Scheduled wakeup #1" in result_text(second)
    assert len(await app.scheduler.jobs.listing()) == 1


async def test_limits_per_role(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(
        make_app, clock, scheduler={"max_jobs": {"user": 1}, "min_interval_minutes": {"user": 30}}
    )
    await make_user(app, Role.USER)
    fake_anthropic.script(
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "every 10m"})),
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "*/15 * * * *"})),
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "every 1h"})),
        tool_use_reply(tool_call("schedule_add", {"prompt": "p", "when": "in 2 hours"})),
        text_reply("ok"),
    )
    await app.pipeline.handle(message("schedule things"))
    texts = [result_text(tool_results(r)[0]) for r in fake_anthropic.requests[1:5]]
    assert "too frequent: repeats every 10m, the minimum for role user is 30m" in texts[0]
    assert "too frequent: repeats every 15m" in texts[1]
    assert texts[2].startswith("Scheduled wakeup #1: every 1h")
    assert "limit reached: 1 of 1 wakeups for role user" in texts[3]


async def test_guests_are_not_offered_the_tools_by_default(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    await app.pipeline.handle(message("hello"))
    names = {tool["name"] for tool in fake_anthropic.last_request.tools}
    assert "schedule_add" not in names and "current_time" in names

    await make_user(app, Role.USER)
    await app.pipeline.handle(message("hello again"))
    names = {tool["name"] for tool in fake_anthropic.last_request.tools}
    assert {"schedule_add", "schedule_list", "schedule_remove"} <= names


async def test_list_and_remove_only_own_jobs(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    await make_user(app, Role.USER)
    await make_user(app, Role.USER, platform_user_id="bob", platform_channel_id="bobs-room")
    fake_anthropic.script(
        tool_use_reply(tool_call("schedule_add", {"prompt": "water plants", "when": "every 1d"})),
        text_reply("ok"),
    )
    await app.pipeline.handle(message("water the plants daily"))
    fake_anthropic.script(
        tool_use_reply(tool_call("schedule_list", {}), tool_call("schedule_remove", {"job_id": 1})),
        text_reply("nope"),
    )
    await app.pipeline.handle(
        message("remove job 1", platform_user_id="bob", platform_channel_id="bobs-room")
    )
    listing, removal = tool_results(fake_anthropic.last_request)
    assert result_text(listing) == "No scheduled wakeups."
    assert removal["is_error"] and "no wakeup #1 of this user" in result_text(removal)
    assert (await job(app, 1)).state == "active"

    fake_anthropic.script(
        tool_use_reply(tool_call("schedule_list", {})),
        tool_use_reply(tool_call("schedule_remove", {"job_id": "#1"})),
        text_reply("removed"),
    )
    await app.pipeline.handle(message("remove my plant job"))
    listing = result_text(tool_results(fake_anthropic.requests[-2])[0])
    assert listing == "#1 every 1d, next 2026-11-21 10:00 UTC, in here: water plants"
    removed = result_text(tool_results(fake_anthropic.last_request)[0])
    assert removed == "Removed scheduled wakeup #1 (every 1d)."
    assert (await job(app, 1)).state == "removed"
    assert app.scheduler.next_fire(1) is None


def persona_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "personas"
    folder.mkdir()
    (folder / "default.toml").write_text(
        'name = "default"\nis_default = true\nprompt = "You help."\n'
    )
    (folder / "beat.toml").write_text(
        'name = "beat"\nplatform = "slack"\nprompt = "You keep the team on track."\n'
        "heartbeat_minutes = 30\n"
    )
    return folder


async def test_persona_heartbeat_runs_only_in_active_conversations(
    make_app, fake_anthropic, tmp_path
):
    clock = FakeClock()
    app: Any = await make_app(
        clock=clock,
        personas={"dir": str(persona_dir(tmp_path))},
        budgets={"guest": "unlimited"},  # several runs charged to one guest
    )
    from tests.harness import RecordingAdapter

    slack, console = RecordingAdapter(platform="slack"), RecordingAdapter()
    app.attach(slack)
    app.attach(console)
    await app.scheduler.start(app.pipeline, ["slack", "console"], timer=False)
    heartbeat = app.scheduler.aps.get_job("heartbeat:beat")
    assert heartbeat.trigger.interval == timedelta(minutes=30)

    recent, old = clock.now - timedelta(minutes=10), clock.now - timedelta(hours=3)
    await app.pipeline.handle(
        message("deploy later?", platform="slack", platform_channel_id="C1", received_at=recent)
    )
    await app.pipeline.handle(
        message("old talk", platform="slack", platform_channel_id="C2", received_at=old)
    )
    await app.pipeline.handle(message("console talk", received_at=recent))  # default persona
    slack.sent.clear()
    console.sent.clear()

    fake_anthropic.script("NO_REPLY")
    assert await app.scheduler.heartbeat("beat") == {"slack:C1:-": "silent"}
    assert slack.sent == [] and console.sent == []
    request = fake_anthropic.last_request
    assert request.model == app.settings.llm.fast_model
    assert "NO_REPLY" in request.messages[-1]["content"][0]["text"]

    clock.advance(minutes=30)
    fake_anthropic.script("Did the deploy go out?")
    assert await app.scheduler.heartbeat("beat") == {"slack:C1:-": "answered"}
    assert [(r.target.channel_id, r.text) for r in slack.sent] == [("C1", "Did the deploy go out?")]

    # Heartbeats are not activity: two hours after the last human message, C1 is idle.
    clock.advance(hours=1, minutes=21)
    assert await app.scheduler.heartbeat("beat") == {}
    assert fake_anthropic.request_count == 5
