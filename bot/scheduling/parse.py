"""`when` of a scheduled wakeup → a trigger, and the fire times it gives.

Accepted forms (the agent is told these; errors say what to send instead):
- a time: ISO 8601 "2026-11-23T09:00" (the user's or the configured time zone
  unless it has an offset), "09:00" (the next such time), or "in 20 minutes";
- an interval: "every 2h", "every 30 minutes", "every day", "every 1h30m";
- a standard 5-field cron expression: "0 9 * * MON-FRI" (minute hour
  day-of-month month day-of-week; day-of-week numbers are crontab's, 0 or 7 =
  Sunday, translated for APScheduler 3, which counts from Monday).

Fire times come from APScheduler's own triggers, so what we store and what the
scheduler fires agree.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

TriggerKind = Literal["date", "interval", "cron"]

FORMS = (
    'an ISO time like "2026-11-23T09:00", "09:00" or "in 20 minutes"; '
    'an interval like "every 2h" or "every 30 minutes"; '
    'or a 5-field cron expression like "0 9 * * MON-FRI"'
)
_TINY = timedelta(microseconds=1)
_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}
_DURATION_PART = re.compile(r"(\d+)?\s*([a-z]+)")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-]+$")
_CLOCK_TIME = re.compile(r"^(?:at\s+)?(\d{1,2}):(\d{2})$")


class ScheduleError(ValueError):
    """`when` cannot be used; the message says why and what would work."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r}; use an IANA name like Europe/Paris"
        ) from None


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """A trigger as stored in `scheduled_jobs` (kind, expr, timezone, anchor)."""

    kind: TriggerKind
    expr: str
    timezone: str
    anchor: datetime
    """interval: the first fire time; otherwise unused (creation time)."""

    def build(self) -> BaseTrigger:
        """The APScheduler trigger."""
        tz = zone(self.timezone)
        if self.kind == "date":
            return DateTrigger(run_date=datetime.fromisoformat(self.expr), timezone=tz)
        if self.kind == "interval":
            return IntervalTrigger(seconds=int(self.expr), start_date=self.anchor, timezone=tz)
        minute, hour, day, month, dow = self.expr.split()
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_translate_dow(dow),
            timezone=tz,
        )

    def next_after(self, moment: datetime) -> datetime | None:
        """The first fire time strictly after `moment` (None: never again)."""
        if self.kind == "date":
            run_date = datetime.fromisoformat(self.expr)
            return run_date if run_date > moment else None
        fire: datetime | None = self.build().get_next_fire_time(None, moment + _TINY)
        return None if fire is None else fire.astimezone(UTC)

    def first_from(self, moment: datetime) -> datetime | None:
        """The first fire time at or after `moment`."""
        return self.next_after(moment - _TINY)

    @property
    def interval(self) -> timedelta | None:
        return timedelta(seconds=int(self.expr)) if self.kind == "interval" else None

    def min_gap(self, now: datetime, samples: int = 200) -> timedelta | None:
        """The shortest time between two fires (None for a one-time wakeup)."""
        if self.kind == "date":
            return None
        if self.kind == "interval":
            return self.interval
        fires: list[datetime] = []
        moment = now
        for _ in range(samples):
            fire = self.next_after(moment)
            if fire is None:
                break
            fires.append(fire)
            moment = fire
        gaps = [b - a for a, b in itertools.pairwise(fires)]
        return min(gaps) if gaps else None

    def describe(self) -> str:
        if self.kind == "date":
            local = datetime.fromisoformat(self.expr).astimezone(zone(self.timezone))
            return f"once at {local:%Y-%m-%d %H:%M} {self.timezone}"
        if self.kind == "interval":
            return f"every {format_duration(int(self.expr))}"
        return f"cron {self.expr} ({self.timezone})"


def parse_when(text: str, *, timezone: str, now: datetime) -> TriggerSpec:
    """Parse `when`. Raises `ScheduleError` with a message the agent can act on."""
    when = " ".join(text.strip().split())
    tz = zone(timezone)
    if not when:
        raise ScheduleError(f"`when` is empty; give {FORMS}")
    lowered = when.lower()
    now = now.astimezone(UTC)
    if lowered.startswith("every "):
        seconds = parse_duration(lowered[6:])
        anchor = now.replace(microsecond=0) + timedelta(seconds=seconds)
        return TriggerSpec("interval", str(seconds), timezone, anchor)
    if lowered.startswith("in "):
        seconds = parse_duration(lowered[3:])
        run_at = now + timedelta(seconds=seconds)
        return TriggerSpec("date", run_at.isoformat(), timezone, now)
    clock = _CLOCK_TIME.match(lowered)
    if clock:
        return _next_clock_time(int(clock[1]), int(clock[2]), timezone, now)
    fields = when.split(" ")
    if len(fields) == 5 and all(_CRON_FIELD.match(f) for f in fields):
        return _cron(fields, timezone, now)
    if len(fields) in (4, 6) and all(_CRON_FIELD.match(f) for f in fields):
        raise ScheduleError(
            f"a cron expression needs exactly 5 fields (minute hour day-of-month month "
            f"day-of-week), got {len(fields)} in {when!r}"
        )
    return _iso(when, tz, timezone, now)


def parse_duration(text: str) -> int:
    """ "2h", "30 minutes", "1h30m", "day" → seconds."""
    rest = text.strip().lower().replace(" and ", " ")
    total = 0
    pos = 0
    found = False
    while pos < len(rest):
        if rest[pos] in " ,":
            pos += 1
            continue
        match = _DURATION_PART.match(rest, pos)
        if not match or match[2] not in _UNITS:
            raise ScheduleError(
                f'cannot read the duration {text.strip()!r}; write e.g. "2h", '
                '"30 minutes", "1h30m" or "day"'
            )
        total += int(match[1] or 1) * _UNITS[match[2]]
        pos = match.end()
        found = True
    if not found or total <= 0:
        raise ScheduleError(f"the duration {text.strip()!r} must be longer than zero")
    return total


def format_duration(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _iso(when: str, tz: ZoneInfo, timezone: str, now: datetime) -> TriggerSpec:
    try:
        moment = datetime.fromisoformat(when.replace("z", "Z"))
    except ValueError:
        raise ScheduleError(f"cannot read {when!r} as a time; give {FORMS}") from None
    if len(when) <= 10:
        raise ScheduleError(f"{when!r} has no time of day; add one, e.g. {when}T09:00")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    moment = moment.astimezone(UTC)
    if moment <= now:
        raise ScheduleError(
            f"{when} is in the past (it is now {now.astimezone(tz):%Y-%m-%d %H:%M} "
            f"in {timezone}); give a future time"
        )
    return TriggerSpec("date", moment.isoformat(), timezone, now)


def _next_clock_time(hour: int, minute: int, timezone: str, now: datetime) -> TriggerSpec:
    if hour > 23 or minute > 59:
        raise ScheduleError(f"{hour}:{minute:02d} is not a time of day")
    local_now = now.astimezone(zone(timezone))
    moment = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if moment <= local_now:
        moment += timedelta(days=1)
    return TriggerSpec("date", moment.astimezone(UTC).isoformat(), timezone, now)


def _cron(fields: list[str], timezone: str, now: datetime) -> TriggerSpec:
    expr = " ".join(fields)
    if fields[2] not in ("*", "?") and fields[4] not in ("*", "?"):
        raise ScheduleError(
            f"{expr!r} restricts both day-of-month and day-of-week, which cron reads as "
            "either/or; restrict only one of them (use * for the other)"
        )
    fields = ["*" if f == "?" else f for f in fields]
    spec = TriggerSpec("cron", " ".join(fields), timezone, now)
    try:
        first = spec.next_after(now)
    except (ValueError, KeyError, IndexError) as exc:
        raise ScheduleError(
            f"invalid cron expression {expr!r}: {exc}. Use 5 fields: minute hour "
            'day-of-month month day-of-week, e.g. "0 9 * * MON-FRI" or "*/30 * * * *"'
        ) from None
    if first is None:
        raise ScheduleError(f"the cron expression {expr!r} never fires")
    return spec


def _translate_dow(field: str) -> str:
    """Crontab day-of-week (0 or 7 = Sunday) → an explicit APScheduler list."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for item in field.lower().split(","):
        rng, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if step_text and (not step_text.isdigit() or step < 1):
            raise ValueError(f"bad step in day-of-week {item!r}")
        if rng == "*":
            start, end = 0, 6
        elif "-" in rng:
            low, high = rng.split("-", 1)
            start, end = _day(low), _day(high)
            if end == 0 and high.strip() == "7":
                end = 7
            if start > end:
                raise ValueError(f"day-of-week range {rng!r} goes backwards")
        else:
            start = end = _day(rng)
        days.update(d % 7 for d in range(start, end + 1, step))
    if len(days) == 7:
        return "*"
    return ",".join(_DAYS[d] for d in sorted(days))


def _day(token: str) -> int:
    token = token.strip()
    if token.isdigit():
        value = int(token)
        if value > 7:
            raise ValueError(f"day-of-week {value} is out of range (0-7, 0 and 7 = Sunday)")
        return value % 7
    name = token[:3]
    if name not in _DAYS or token not in (name, _full_day(name)):
        raise ValueError(f"unknown day-of-week {token!r} (use 0-7 or MON..SUN)")
    return _DAYS.index(name)


def _full_day(name: str) -> str:
    return {
        "sun": "sunday",
        "mon": "monday",
        "tue": "tuesday",
        "wed": "wednesday",
        "thu": "thursday",
        "fri": "friday",
        "sat": "saturday",
    }[name]
