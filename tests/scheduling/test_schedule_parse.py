"""`when` parsing and fire times (APScheduler's own triggers, fixed clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.scheduling.parse import ScheduleError, parse_when
from tests.scheduling.rig import T0


def fires(when: str, count: int, *, timezone: str = "UTC", now: datetime = T0) -> list[datetime]:
    spec = parse_when(when, timezone=timezone, now=now)
    out: list[datetime] = []
    moment = now
    for _ in range(count):
        fire = spec.next_after(moment)
        assert fire is not None
        out.append(fire)
        moment = fire
    return out


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_interval_fires_every_period_from_creation():
    assert fires("every 2h", 3) == [T0 + timedelta(hours=h) for h in (2, 4, 6)]
    assert fires("every 1h30m", 2) == [T0 + timedelta(minutes=m) for m in (90, 180)]
    assert fires("every 30 minutes", 1) == [T0 + timedelta(minutes=30)]
    assert fires("every day", 1) == [T0 + timedelta(days=1)]


def test_cron_weekdays_in_a_time_zone():
    # Friday 11:00 in Paris: the next 09:00 on a weekday is Monday.
    assert fires("0 9 * * MON-FRI", 3, timezone="Europe/Paris") == [
        utc(2026, 11, 23, 8, 0),
        utc(2026, 11, 24, 8, 0),
        utc(2026, 11, 25, 8, 0),
    ]


def test_cron_day_numbers_are_crontabs_not_apschedulers():
    # crontab: 1-5 = Monday..Friday, 0 and 7 = Sunday (APScheduler 3 counts 0 = Monday)
    assert fires("0 9 * * 1-5", 1) == fires("0 9 * * MON-FRI", 1)
    assert fires("0 9 * * 0", 1) == [utc(2026, 11, 22, 9, 0)]  # Sunday
    assert fires("0 9 * * 7", 1) == [utc(2026, 11, 22, 9, 0)]
    assert fires("0 9 * * 6,0", 2) == [utc(2026, 11, 21, 9, 0), utc(2026, 11, 22, 9, 0)]
    assert fires("0 9 * * */3", 3) == [  # Sun, Wed, Sat
        utc(2026, 11, 21, 9, 0),
        utc(2026, 11, 22, 9, 0),
        utc(2026, 11, 25, 9, 0),
    ]


def test_cron_follows_daylight_saving_time():
    before = utc(2027, 3, 26, 12, 0)  # Paris switches to summer time on 28 March 2027
    assert fires("30 8 * * *", 3, timezone="Europe/Paris", now=before) == [
        utc(2027, 3, 27, 7, 30),
        utc(2027, 3, 28, 6, 30),
        utc(2027, 3, 29, 6, 30),
    ]


def test_one_time_wakeups():
    spec = parse_when("in 20 minutes", timezone="UTC", now=T0)
    assert (spec.kind, spec.next_after(T0)) == ("date", T0 + timedelta(minutes=20))
    assert spec.next_after(T0 + timedelta(minutes=20)) is None  # once
    paris = parse_when("2026-11-23T09:00", timezone="Europe/Paris", now=T0)
    assert paris.next_after(T0) == utc(2026, 11, 23, 8, 0)
    offset = parse_when("2026-11-23 09:00+02:00", timezone="Europe/Paris", now=T0)
    assert offset.next_after(T0) == utc(2026, 11, 23, 7, 0)
    # "09:00" is the next such time: tomorrow, since it is 11:00 in Paris
    assert parse_when("09:00", timezone="Europe/Paris", now=T0).next_after(T0) == utc(
        2026, 11, 21, 8, 0
    )


def test_minimum_gap():
    assert parse_when("every 2h", timezone="UTC", now=T0).min_gap(T0) == timedelta(hours=2)
    cron = parse_when("*/5 9 * * *", timezone="UTC", now=T0)
    assert cron.min_gap(T0) == timedelta(minutes=5)
    assert parse_when("in 1h", timezone="UTC", now=T0).min_gap(T0) is None


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("61 * * * *", "invalid cron expression '61 * * * *'"),
        ("0 9 * * 8", "day-of-week 8 is out of range"),
        ("0 9 * *", "needs exactly 5 fields"),
        ("0 9 1 * MON", "restrict only one of them"),
        ("0 0 31 2 *", "never fires"),
        ("2020-01-01T09:00", "is in the past"),
        ("2026-12-01", "has no time of day"),
        ("tomorrow-ish", "give an ISO time"),
        ("every fortnight", "cannot read the duration"),
        ("every 0m", "longer than zero"),
        ("", "`when` is empty"),
    ],
)
def test_bad_values_say_what_to_do(when: str, message: str):
    with pytest.raises(ScheduleError) as caught:
        parse_when(when, timezone="UTC", now=T0)
    assert message in str(caught.value)


def test_unknown_time_zone():
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Base'"):
        parse_when("every 2h", timezone="Mars/Base", now=T0)
