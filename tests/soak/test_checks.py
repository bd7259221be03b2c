"""The soak's checks, fed crafted facts: each kind of violation is found, and a
clean soak has none. (The soak itself is `make soak`, not part of the suite.)"""

from __future__ import annotations

from tests.soak import checks
from tests.soak.facts import (
    Account,
    BotMessage,
    Charge,
    Facts,
    InboxRow,
    LogLine,
    Message,
    RunRow,
    Wakeup,
)
from tests.soak.model import ModelCall, current_turn

DM = "slack:D1"
ALLOWANCE = 12_000


def clean() -> Facts:
    """Two messages of one DM answered once each, in order, charged right."""
    return Facts(
        messages=[
            Message("m:s0001", DM, "slack:U1", 0, True),
            Message("m:s0002", DM, "slack:U1", 1, True),
        ],
        bot_messages=[BotMessage(DM, 1, "ok m:s0001"), BotMessage(DM, 2, "ok m:s0002")],
        inbox=[
            InboxRow("m:s0001", "slack:U1", "answered", run_id="r1", finished_at=10.0),
            InboxRow("m:s0002", "slack:U1", "answered", run_id="r2", finished_at=20.0),
        ],
        runs=[RunRow("r1", "completed"), RunRow("r2", "completed")],
        charges=[Charge(1, 9.0, 3000, "r1"), Charge(1, 19.0, 3100, "r2")],
        accounts=[Account(1, "slack:U1", 6100, 0, ALLOWANCE)],
        model_calls=[ModelCall(8.0, ("m:s0001",), 2800), ModelCall(18.0, ("m:s0002",), 2900)],
        checked_at=100.0,
    )


def violations(facts: Facts) -> dict[str, list[str]]:
    return {k: v for k, v in checks.judge(facts).violations.items() if v}


def row(verdict: checks.Verdict, what: str) -> int:
    return next(count for name, count, _ in verdict.rows if name == what)


def test_a_clean_soak_has_no_violation() -> None:
    verdict = checks.judge(clean())
    assert verdict.ok, verdict.violations
    assert row(verdict, "accepted messages") == 2
    assert row(verdict, "answered exactly once") == 2


def test_a_lost_message_is_found() -> None:
    facts = clean()
    facts.bot_messages.pop()  # m:s0002 never answered, nothing recorded
    assert list(violations(facts)) == ["lost"]
    assert "m:s0002" in violations(facts)["lost"][0]


def test_a_message_never_stored_is_lost_but_one_failed_and_listed_is_not() -> None:
    facts = clean()
    facts.bot_messages.pop()
    facts.inbox[1] = InboxRow("m:s0002", "slack:U1", "failed", "Overloaded", "r2", 20.0, True)
    assert violations(facts) == {}
    assert row(checks.judge(facts), "failed and recorded") == 1
    facts.inbox.pop()  # no inbox row at all: lost
    assert "no inbox row" in violations(facts)["lost"][0]


def test_a_failure_not_shown_to_the_operator_counts_as_lost() -> None:
    facts = clean()
    facts.bot_messages.pop()
    facts.inbox[1] = InboxRow("m:s0002", "slack:U1", "failed", "boom", "r2", 20.0, listed=False)
    assert list(violations(facts)) == ["lost"]


def test_a_double_answer_is_found() -> None:
    facts = clean()
    facts.bot_messages.append(BotMessage(DM, 3, "ok m:s0002"))  # e.g. resent after a kill
    assert list(violations(facts)) == ["answered twice"]


def test_one_message_edited_twice_is_answered_once() -> None:
    facts = clean()
    facts.bot_messages[1] = BotMessage(DM, 2, "ok m:s0002 (final text after edits)")
    assert violations(facts) == {}


def test_an_out_of_order_pair_is_found() -> None:
    facts = clean()
    facts.bot_messages = [BotMessage(DM, 1, "ok m:s0002"), BotMessage(DM, 2, "ok m:s0001")]
    found = violations(facts)
    assert list(found) == ["out of order"]
    assert "m:s0002 answered before m:s0001, sent earlier" in found["out of order"][0]


def test_messages_answered_together_are_in_order() -> None:
    facts = clean()
    facts.bot_messages = [BotMessage(DM, 1, "ok m:s0001 m:s0002")]  # a merged burst
    assert violations(facts) == {}


def refused_second(used_before: int) -> Facts:
    """m:s0002 refused at t=20; the user had settled `used_before` by then."""
    facts = clean()
    facts.bot_messages = [
        BotMessage(DM, 1, "ok m:s0001"),
        BotMessage(
            DM, 2, "You've used 3,000 of your 12,000 tokens; the allowance resets on 1 May."
        ),
    ]
    facts.inbox[1] = InboxRow("m:s0002", "slack:U1", "refused", None, "r2", 20.0)
    figures = f"used={used_before} held=9000 estimate=3100 allowance=12000"
    facts.runs[1] = RunRow("r2", "refused", figures)
    facts.charges = [Charge(1, 9.0, used_before, "r1")]
    facts.accounts = [Account(1, "slack:U1", used_before, 0, ALLOWANCE)]
    facts.model_calls = facts.model_calls[:1]
    return facts


def test_a_false_refusal_is_found() -> None:
    facts = refused_second(used_before=3000)  # 3000 + 3100 fits in 12000
    found = violations(facts)
    assert list(found) == ["false budget refusals"]
    assert "used 3000 + estimate 3100 <= allowance 12000" in found["false budget refusals"][0]
    assert "held=9000" in found["false budget refusals"][0]  # the service's own account
    verdict = checks.judge(facts)
    assert row(verdict, "refused (budget)") == 1
    assert row(verdict, "  of them recorded per the refusal contract") == 1
    assert row(verdict, "  refusals shown on the platforms") == 1


def test_a_refusal_without_figures_is_judged_by_the_checks_own_estimate() -> None:
    facts = refused_second(used_before=3000)
    facts.runs[1] = RunRow("r2", "refused", "something else")
    found = violations(facts)["false budget refusals"]
    assert "settled 3000 + estimate 3056 <= allowance 12000" in found[0]
    facts = refused_second(used_before=10_000)
    facts.runs[1] = RunRow("r2", "refused", None)
    assert violations(facts) == {}  # 10000 + 2800 + 256 > 12000


def refused_with(used_before: int, figures: str) -> Facts:
    facts = refused_second(used_before)
    facts.runs[1] = RunRow("r2", "refused", f"budget: {figures}")
    return facts


def test_a_refusal_is_judged_by_its_figures_checked_against_the_logs() -> None:
    """Seed 7: the request refused was larger than the conversation's last one
    (the check's own estimate, 2800 + 256, was on the margin): its recorded
    figures are fair, and each is checked against the soak's facts."""
    fair = refused_with(8900, "used=8900 held=0 estimate=3200 allowance=12000")
    assert violations(fair) == {}  # 8900 + 3200 > 12000; 8900 + 2800 + 256 is not
    unlogged = refused_with(9000, "used=9500 held=0 estimate=3100 allowance=12000")
    assert "recorded used 9500, the token logs show 9000" in str(violations(unlogged))
    inflated = refused_with(9000, "used=9000 held=0 estimate=11392 allowance=12000")
    assert "estimate 11392 is not a call's" in str(violations(inflated))  # max_tokens
    other = refused_with(9000, "used=9000 held=0 estimate=3100 allowance=10000")
    assert "recorded allowance 10000, the user's is 12000" in str(violations(other))


def test_a_refusal_when_the_allowance_is_spent_is_fair() -> None:
    facts = refused_second(used_before=10_000)  # 10000 + 3100 > 12000
    assert violations(facts) == {}


def test_usage_settled_after_the_refusal_does_not_excuse_it() -> None:
    facts = refused_second(used_before=3000)
    facts.charges.append(Charge(1, 25.0, 8000, "r3"))  # later than the refusal (t=20)
    facts.accounts = [Account(1, "slack:U1", 11_000, 0, ALLOWANCE)]
    assert list(violations(facts)) == ["false budget refusals"]


def test_a_mis_charge_is_found() -> None:
    facts = clean()
    facts.accounts = [Account(1, "slack:U1", 3000, 0, ALLOWANCE)]  # one settlement missing
    found = violations(facts)
    assert list(found) == ["mis-charged"]
    assert "used 3000 + overage 0 != token logs 6100" in found["mis-charged"][0]


def test_overage_counts_as_charged() -> None:
    facts = clean()
    facts.accounts = [Account(1, "slack:U1", 5000, 1100, 5000)]
    facts.charges = [Charge(1, 9.0, 3000, "r1"), Charge(1, 19.0, 3100, "r2")]
    assert violations(facts) == {}  # past by 1100, less than one call


def test_spending_past_the_allowance_by_more_than_a_call_is_found() -> None:
    facts = clean()
    facts.charges = [Charge(1, float(t), 3000, None) for t in range(5)]  # 3000 over
    facts.accounts = [Account(1, "slack:U1", ALLOWANCE, 3000, ALLOWANCE)]
    assert violations(facts) == {}  # past by one call at most
    facts.charges.append(Charge(1, 6.0, 3000, None))
    facts.accounts = [Account(1, "slack:U1", ALLOWANCE, 6000, ALLOWANCE)]
    assert list(violations(facts)) == ["overspent"]


def test_wakeups_due_must_fire_exactly_once() -> None:
    facts = clean()
    facts.wakeups = [
        Wakeup("w:s0001", 50.0, "done", 1),
        Wakeup("w:s0002", 60.0, "done", 2),
        Wakeup("w:s0003", 70.0, "active", 0),
        Wakeup("w:s0004", 500.0, "active", 0),  # not due yet
    ]
    facts.bot_messages += [
        BotMessage(DM, 3, "fired w:s0001"),
        BotMessage(DM, 4, "fired w:s0002"),
        BotMessage(DM, 5, "fired w:s0002"),
    ]
    due, once, problems = checks.wakeups(facts)
    assert (due, once) == (3, 1)
    assert [p.split(":")[0] + ":" + p.split(":")[1] for p in problems] == ["w:s0002", "w:s0003"]


def test_work_left_after_the_drain_is_found() -> None:
    facts = clean()
    facts.inbox.append(InboxRow("m:s0003", "slack:U1", "running"))
    facts.outbox_pending = 2
    assert len(violations(facts)["stuck after the drain"]) == 2


def test_error_lines_need_a_recorded_cause() -> None:
    facts = clean()
    facts.runs[1] = RunRow("r2", "failed", "Overloaded: overloaded")
    facts.logs = [
        LogLine("a", "ERROR", "run.provider_error", "r2", "Overloaded"),  # recorded on its run
        LogLine("a", "ERROR", "run.crashed", "r1", "boom"),  # r1 completed: no record of it
        LogLine("b", "ERROR", "db.lost", None, "connection reset"),
        LogLine("b", "WARNING", "slack.post_retry", None, "503"),
    ]
    found = violations(facts)["ERROR lines without a recorded cause"]
    assert [line.split("]")[1].split(":")[0].strip() for line in found] == [
        "run.crashed",
        "db.lost",
    ]


def test_the_model_answers_the_current_turn_only() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hello m:s0001"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok m:s0001"}]},
            {"role": "user", "content": [{"type": "text", "text": "quick m:s0002 do:wakeup"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "schedule_add", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "scheduled"},
                    {"type": "text", "text": "quick m:s0003"},
                ],
            },
        ]
    }
    turn = current_turn(body)
    assert turn.tokens == ("m:s0002", "m:s0003")
    assert turn.directives == frozenset({"wakeup"})
    assert turn.tools_called == frozenset({"schedule_add"})
