"""Parse schedule expressions and locate their ticks as UTC epoch seconds.

Pure tick math (DESIGN.md section 6): nothing here reads a clock or touches Redis, so every
node computes the same ticks from the same expression. An expression is 5-field cron, 6-field
cron with seconds first, an alias (``@daily``...) or ``@every <duration>``, whose ticks are
whole multiples of the period since the Unix epoch in every time zone.

Cron fields are read in the job's IANA time zone and follow cronie (Debian cron):

- day-of-month and day-of-week combine with OR when both are restricted, with AND when
  either starts with ``*``;
- a job whose minute and hour fields are both fixed (neither starts with ``*``) fires at most
  once per local time: a local time that occurs twice (fall back) fires at its first
  occurrence only, and local times skipped by a forward jump (spring forward) fire once at
  the instant of the jump, which is the first instant after the gap;
- any other job follows real elapsed time: it fires at every instant whose local wall time
  matches, so in a repeated hour it fires in both occurrences and wall times inside a gap,
  which never happen, do not fire.

The fields are parsed here rather than with croniter: croniter names no field in its errors,
expands ``7-7`` in day-of-week to every day and silently wraps reversed ranges, and building
a croniter per call costs about 60 µs, too slow for a scheduler asking 1000 jobs a second.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronrace.errors import ScheduleError

__all__ = ["Schedule"]

_DAY_S = 86_400
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# Transitions are found by sampling the UTC offset this often and bisecting each change.
# The closest two offset changes in tzdata since 1900 are four days apart (Africa/Freetown,
# 1939), so six hours cannot step over a pair.
_SAMPLE_S = 6 * 3600
# Keeping starts within 1000-9000 keeps every search (at most 57 years, see
# _repeat_horizon_s) inside what datetime represents.
_MIN_S = (date(1000, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY_S
_MAX_S = (date(9000, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY_S

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
# Longer than any schedule worth writing (a 6-field expression listing every value of every
# field is about 400 characters); longer input is refused before any work is done on it.
_MAX_EXPR_CHARS = 1024
# "@every" ticks must stay far inside what datetime, Redis and Lua's doubles represent.
_MAX_PERIOD_S = 3650 * _DAY_S
# Beyond 18 digits a number is out of every range; int() of thousands of digits is refused
# by Python itself (a bare ValueError), so long digit strings never reach it.
_MAX_DIGITS = 18
_HUGE = 10**_MAX_DIGITS
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
# The longest IANA key is 38 characters (right/America/Argentina/ComodRivadavia); zoneinfo
# imports one package per path component, and a few hundred overflow the stack.
_MAX_ZONE_CHARS = 64
# Real files under the zoneinfo directory that are not zones every node agrees on.
_NOT_ZONES = ("localtime", "posixrules", "Factory")


class _InvalidError(Exception):
    """One-line reason an expression is invalid, completed with job and value by parse."""


def _quote(value: object, limit: int = 60) -> str:
    """Quote a value for an error line; a long one is cut, and its length said."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}...{size}"


def _digits_value(digits: str) -> int:
    """Return the value of an ASCII digit string, or ``_HUGE`` for one beyond every range."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= _MAX_DIGITS else _HUGE


def _check_characters(text: str) -> None:
    """Refuse what no cron reads: non-ASCII digits and spaces, control characters."""
    if len(text) > _MAX_EXPR_CHARS:
        raise _InvalidError(f"longer than {_MAX_EXPR_CHARS} characters")
    for position, char in enumerate(text):
        if not (" " <= char <= "~" or char == "\t"):
            raise _InvalidError(
                f"character {char!r} (U+{ord(char):04X}) at position {position} is not allowed: "
                "use ASCII letters, digits, punctuation and spaces"
            )


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] spells the value low + i


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
_DOW = _Field("day-of-week", 0, 7, _DAY_NAMES)  # 7 is Sunday as well as 0, as in every cron


def _month_len(year: int, month: int) -> int:
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return _MONTH_DAYS[month] + leap


@dataclass(frozen=True, slots=True)
class _Cron:
    """Expanded cron fields plus the two cronie flags that change their meaning."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    last_day: bool
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    nth_weekdays: frozenset[tuple[int, int]]  # (weekday, n), n == -1 for the last one
    days_and: bool
    fixed_time: bool

    def day_matches(self, day: int, weekday: int, month_len: int) -> bool:
        dom = day in self.days or (self.last_day and day == month_len)
        dow = (
            weekday in self.weekdays
            or (weekday, (day + 6) // 7) in self.nth_weekdays
            or ((weekday, -1) in self.nth_weekdays and day + 7 > month_len)
        )
        return dom and dow if self.days_and else dom or dow

    def fires_ever(self) -> bool:
        # Every (month, day, weekday, month length) combination occurs in the 400-year
        # Gregorian cycle, so matching one of them means the schedule fires.
        return any(
            self.day_matches(day, weekday, month_len)
            for month in self.months
            for month_len in ((28, 29) if month == 2 else (_MONTH_DAYS[month],))
            for day in range(1, month_len + 1)
            for weekday in range(7)
        )

    def next_second_of_day(self, second_of_day: int) -> int | None:
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect.bisect_left(hours, hour)
        if i == len(hours):
            return None
        if hours[i] == hour:
            j = bisect.bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect.bisect_left(seconds, second)
                if k < len(seconds):
                    return hour * 3600 + minute * 60 + seconds[k]
                j += 1
            if j < len(minutes):
                return hour * 3600 + minutes[j] * 60 + seconds[0]
            i += 1
            if i == len(hours):
                return None
        return hours[i] * 3600 + minutes[0] * 60 + seconds[0]

    def next_wall(self, low: int, high: int) -> int | None:
        """Return the first matching local wall second in [low, high), or None."""
        day, second_of_day = divmod(low, _DAY_S)
        while day * _DAY_S < high:
            d = date.fromordinal(_EPOCH_ORDINAL + day)
            if d.month not in self.months:
                first_of_next = date(d.year + d.month // 12, d.month % 12 + 1, 1)
                day, second_of_day = first_of_next.toordinal() - _EPOCH_ORDINAL, 0
                continue
            if self.day_matches(d.day, d.isoweekday() % 7, _month_len(d.year, d.month)):
                found = self.next_second_of_day(second_of_day)
                if found is not None:
                    wall = day * _DAY_S + found
                    return wall if wall < high else None
            day, second_of_day = day + 1, 0
        return None


def _offset_s(zone: ZoneInfo, t: int) -> int:
    offset = datetime.fromtimestamp(t, zone).utcoffset()
    assert offset is not None  # an aware datetime always has one
    return offset.days * _DAY_S + offset.seconds


def _year_start_s(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY_S


@functools.lru_cache(maxsize=4096)
def _transitions(zone: ZoneInfo, year: int) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Return one UTC year's offset changes: instants and (before, after) offsets.

    zoneinfo keeps its table private, so offsets are sampled and each change bisected.
    """
    times: list[int] = []
    offsets: list[tuple[int, int]] = []
    end = _year_start_s(year + 1) - 1
    t = _year_start_s(year) - 1
    before = _offset_s(zone, t)
    while t < end:
        probe = min(t + _SAMPLE_S, end)
        if _offset_s(zone, probe) == before:
            t = probe
            continue
        low, high = t, probe
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _offset_s(zone, middle) == before else (low, middle)
        after = _offset_s(zone, high)
        times.append(high)
        offsets.append((before, after))
        t, before = high, after
    return tuple(times), tuple(offsets)


def _segment(zone: ZoneInfo, t: int) -> tuple[int, tuple[int, int, int] | None, int]:
    """Return the offset at t, the last change (at, before, after) up to t, and the next one.

    Without a change within a year, the last is None and the next is a synthetic boundary.
    """
    year = date.fromordinal(_EPOCH_ORDINAL + t // _DAY_S).year
    times, offsets = _transitions(zone, year)
    i = bisect.bisect_right(times, t)
    if not i:
        times_before, offsets_before = _transitions(zone, year - 1)
        times, offsets, i = times_before + times, offsets_before + offsets, len(times_before)
    previous = (times[i - 1], *offsets[i - 1]) if i else None
    if i == len(times):
        times_after, _ = _transitions(zone, year + 1)
        times += times_after or (_year_start_s(year + 2),)
    end = times[i]
    offset = previous[2] if previous is not None else _offset_s(zone, t)
    return offset, previous, end


def _expand(text: str, spec: _Field) -> tuple[set[int], set[tuple[int, int]], bool]:
    """Expand one cron field into its values, its nth/last weekdays and its `L` flag."""

    def number(token: str) -> int:
        if token.lower() in spec.names:
            return spec.names.index(token.lower()) + spec.low
        if not (token.isascii() and token.isdigit()):
            kind = "a number or name" if spec.names else "a number"
            raise _InvalidError(f"{spec.name} {_quote(token)} is not {kind}")
        value = _digits_value(token)
        if not spec.low <= value <= spec.high:
            shown = value if value < _HUGE else _quote(token)
            raise _InvalidError(f"{spec.name} {shown} out of range {spec.low}-{spec.high}")
        return value

    values: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_day = False
    for item in text.split(","):
        if spec is _DOM and item.upper() == "L":
            last_day = True
        elif spec is _DOW and "#" in item:
            weekday, _, which = item.partition("#")
            if which not in ("1", "2", "3", "4", "5"):
                raise _InvalidError(f"{spec.name} {_quote(item)}: the week after '#' must be 1-5")
            nth.add((number(weekday) % 7, int(which)))
        elif spec is _DOW and len(item) > 1 and item[-1] in "lL":
            nth.add((number(item[:-1]) % 7, -1))
        else:
            base, slash, step_text = item.partition("/")
            if base == "*" or (base == "?" and spec in (_DOM, _DOW)):
                low, high = spec.low, spec.high
            elif "-" in base:
                low_text, _, high_text = base.partition("-")
                low, high = number(low_text), number(high_text)
                if low > high:
                    raise _InvalidError(f"{spec.name} range {_quote(base)} runs backwards")
            else:
                low = number(base)
                high = spec.high if slash else low
            step = 1
            if slash:
                if not (step_text.isascii() and step_text.isdigit()) or not any(
                    digit != "0" for digit in step_text
                ):
                    raise _InvalidError(
                        f"{spec.name} step {_quote(step_text)} is not a positive number"
                    )
                # A step beyond the field's width picks its first value only, as in cronie.
                step = min(_digits_value(step_text), spec.high - spec.low + 1)
            values.update(range(low, high + 1, step))
    if spec is _DOW:
        values = {value % 7 for value in values}
    return values, nth, last_day


def _parse_cron(text: str) -> _Cron:
    fields = text.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    elif len(fields) != 6:
        raise _InvalidError(f"expected 5 or 6 fields, got {len(fields)}")
    second, minute, hour, dom, month, dow = fields
    days, _, last_day = _expand(dom, _DOM)
    weekdays, nth_weekdays, _ = _expand(dow, _DOW)
    cron = _Cron(
        seconds=tuple(sorted(_expand(second, _SECOND)[0])),
        minutes=tuple(sorted(_expand(minute, _MINUTE)[0])),
        hours=tuple(sorted(_expand(hour, _HOUR)[0])),
        days=frozenset(days),
        last_day=last_day,
        months=frozenset(_expand(month, _MONTH)[0]),
        weekdays=frozenset(weekdays),
        nth_weekdays=frozenset(nth_weekdays),
        # cronie's rule: a field beginning with '*' counts as unrestricted.
        days_and=dom.startswith(("*", "?")) or dow.startswith(("*", "?")),
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
    )
    if not cron.fires_ever():
        raise _InvalidError("it never fires: no date matches its day and month fields")
    return cron


def _parse_every(duration: str) -> int:
    match = _DURATION.fullmatch(duration.lower())
    if not duration or match is None:
        raise _InvalidError(f"duration {_quote(duration)} is not like 90s, 5m, 1h30m or 1d")
    days, hours, minutes, seconds = (_digits_value(part or "0") for part in match.groups())
    period_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if period_s < 1:
        raise _InvalidError(f"duration {_quote(duration)} is shorter than 1s")
    if period_s > _MAX_PERIOD_S:
        raise _InvalidError(
            f"duration {_quote(duration)} is longer than {_MAX_PERIOD_S // _DAY_S}d (10 years)"
        )
    return period_s


def _parse_expression(expr: str) -> _Cron | int:
    """Return the cron fields of an expression, or the period of an ``@every``."""
    if not isinstance(expr, str):
        raise _InvalidError("it is not a string")
    _check_characters(expr)
    words = expr.split()
    if words and words[0].lower() == "@every":
        if len(words) != 2:
            raise _InvalidError("expected '@every <duration>', e.g. '@every 5m'")
        return _parse_every(words[1])
    if len(words) == 1 and words[0].startswith("@"):
        if words[0].lower() not in _ALIASES:
            raise _InvalidError(f"unknown alias {_quote(words[0])}")
        return _parse_cron(_ALIASES[words[0].lower()])
    return _parse_cron(expr)


def _load_zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not _ZONE_KEY.fullmatch(name) or name in _NOT_ZONES:
        raise _InvalidError("not an IANA time zone name")
    if len(name) > _MAX_ZONE_CHARS:
        raise _InvalidError(f"longer than {_MAX_ZONE_CHARS} characters, the most an IANA name has")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _InvalidError("unknown IANA time zone") from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule in a time zone; build one with :meth:`Schedule.parse`.

    Attributes:
        expr: the expression as the user wrote it.
        timezone: the IANA time zone its cron fields are read in.
    """

    expr: str
    timezone: str
    _zone: ZoneInfo = field(repr=False, compare=False)
    _cron: _Cron | None = field(default=None, repr=False, compare=False)
    _period_s: int = field(default=0, repr=False, compare=False)

    @classmethod
    def parse(
        cls,
        expr: str,
        timezone: str = "UTC",
        *,
        job: str | None = None,
        fires_after_s: int | None = None,
    ) -> Schedule:
        """Return the schedule of a cron expression, alias or ``@every`` in a time zone.

        Args:
            expr: 5-field cron, 6-field cron with seconds first, an alias such as
                ``@daily``, or ``@every 1h30m``.
            timezone: IANA time zone name the cron fields are read in.
            job: name of the job, quoted in the error message.
            fires_after_s: when given (UTC epoch seconds, usually now), also refuse a
                schedule that never fires after that instant in its zone: one whose every
                matching local time falls in a daylight-saving gap.

        Raises:
            ScheduleError: the expression or the time zone cannot be used; the one-line
                message names the job, the field and the value.
        """
        where = f"job {job!r}: " if job is not None else ""
        try:
            zone = _load_zone(timezone)
        except _InvalidError as error:
            raise ScheduleError(
                f"{where}timezone {_quote(timezone)} is invalid: {error}", reason=str(error)
            ) from None
        try:
            spec = _parse_expression(expr)
        except _InvalidError as error:
            raise ScheduleError(
                f"{where}schedule {_quote(expr)} is invalid: {error}", reason=str(error)
            ) from None
        if isinstance(spec, int):
            return cls(expr, timezone, zone, _period_s=spec)
        schedule = cls(expr, timezone, zone, spec)
        if fires_after_s is not None:
            until_s = _repeat_horizon_s(fires_after_s)
            if schedule._search(fires_after_s, until_s) is None:
                reason = (
                    f"it never fires in {timezone}: every local time it matches falls in a "
                    f"gap where clocks jump forward (searched through {_year(until_s) - 1} "
                    "with this machine's tzdata)"
                )
                raise ScheduleError(
                    f"{where}schedule {_quote(expr)} is invalid: {reason}", reason=reason
                )
        return schedule

    def next_tick(self, after_s: int) -> int:
        """Return the first tick strictly after ``after_s``, in UTC epoch seconds.

        Args:
            after_s: UTC epoch seconds; the result is greater than it.

        Raises:
            ScheduleError: the schedule never fires after ``after_s`` (its zone's rules
                changed since it was checked with ``fires_after_s``).
        """
        if self._period_s:
            return (after_s // self._period_s + 1) * self._period_s
        # Many jobs share one expression and ask at the same wake-up with the same after_s:
        # equal schedules hash alike, so they share the answer (4.5 µs saved per job).
        return _next_cron_tick(self, after_s)

    def _search(self, after_s: int, until_s: int) -> int | None:
        """Return the first tick after ``after_s``, or None when none starts before ``until_s``."""
        if not _MIN_S <= after_s <= _MAX_S:
            raise ValueError(f"after_s {after_s} is outside the years 1000-9000")
        assert self._cron is not None
        cron, zone = self._cron, self._zone
        t = after_s + 1
        while t < until_s:
            offset, previous, end = _segment(zone, t)
            low = t + offset
            if cron.fixed_time and previous is not None:
                at, before, after = previous
                if before > after:
                    # Fall back: wall times up to at + before already happened once, in
                    # the previous segment; a fixed-time job does not fire them again.
                    low = max(low, at + before)
                elif at == t and cron.next_wall(at + before, at + after) is not None:
                    # Spring forward: fixed times the jump skipped fire once, right now.
                    return t
            wall = cron.next_wall(low, end + offset)
            if wall is not None:
                return wall - offset
            t = end
        return None

    def ticks_between(self, after_s: int, until_s: int, limit: int) -> list[int]:
        """Return the earliest ticks t with ``after_s < t <= until_s``, ascending.

        Args:
            after_s: exclusive lower bound, UTC epoch seconds.
            until_s: inclusive upper bound, UTC epoch seconds.
            limit: most ticks to return; the earliest ones are kept.
        """
        if self._period_s:
            first = (after_s // self._period_s + 1) * self._period_s
            last = min(until_s, first + (limit - 1) * self._period_s)
            return list(range(first, last + 1, self._period_s)) if limit > 0 else []
        ticks: list[int] = []
        tick = after_s
        while len(ticks) < limit:
            tick = self.next_tick(tick)
            if tick > until_s:
                break
            ticks.append(tick)
        return ticks

    def count_between(self, after_s: int, until_s: int, cap: int) -> int:
        """Count the ticks in ``(after_s, until_s]``, stopping at ``cap``.

        Args:
            after_s: exclusive lower bound, UTC epoch seconds.
            until_s: inclusive upper bound, UTC epoch seconds.
            cap: largest count worth knowing; returned when there are more ticks.
        """
        if self._period_s:
            return max(0, min(cap, until_s // self._period_s - after_s // self._period_s))
        return len(self.ticks_between(after_s, until_s, cap))

    def interval_s(self, around_s: int) -> int:
        """Return the nominal period near ``around_s``: the gap between the next two ticks.

        Args:
            around_s: UTC epoch seconds the period is wanted for.
        """
        first = self.next_tick(around_s)
        return self.next_tick(first) - first


def _repeat_horizon_s(after_s: int) -> int:
    """Return an instant by which a schedule that ever fires after ``after_s`` has fired.

    What a cron expression matches in a year, and where tzdata's recurring rules put that
    year's clock changes ("second Sunday of March"), depend only on the year's kind: the
    weekday of 1 January and whether it is a leap year. Any 28 consecutive years without a
    skipped leap year (1900, 2100, 2200...) hold all 14 kinds, so a tick after ``after_s``,
    if any, comes before the end of the first such run of whole years. This holds for the
    rules of the tzdata installed now; zones whose future changes tzdata lists one by one
    (Morocco's around Ramadan) are only searched as far, and rules changed by a later
    tzdata are the scheduler's to survive, not this check's.
    """
    first = _year(after_s) + 1
    for year in range(first, first + 28):
        if year % 100 == 0 and year % 400 != 0:
            first = year + 1
    # A day more: the horizon is UTC and local years start up to 14 hours off it.
    return _year_start_s(first + 28) + _DAY_S


def _year(t: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + t // _DAY_S).year


@functools.lru_cache(maxsize=4096)
def _next_cron_tick(schedule: Schedule, after_s: int) -> int:
    until_s = _repeat_horizon_s(after_s)
    tick = schedule._search(after_s, until_s)
    if tick is None:
        raise ScheduleError(
            f"schedule {_quote(schedule.expr)} in {schedule.timezone} never fires after "
            f"{after_s} (searched through {_year(until_s) - 1})"
        )
    return tick
