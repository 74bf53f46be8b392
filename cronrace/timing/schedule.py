"""Parse schedule expressions and locate their ticks as UTC epoch seconds.

Pure tick math (docs/design.md section 6): nothing here reads a clock or touches Redis, so every
node computes the same ticks from the same expression. An expression is 5-field cron, 6-field
cron with seconds first, an alias (``@daily``...) or ``@every <duration>``, whose ticks are
whole multiples of the period since the Unix epoch in every time zone. The cron language
itself (``H``, ``W``, wrapping ranges...) is read by :mod:`cronrace.timing.cronfields`; where a
zone's offset changes is found by :mod:`cronrace.timing.zones`.

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

import functools
import re
from dataclasses import dataclass, field
from datetime import date
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronrace.errors import ScheduleError
from cronrace.timing.cronfields import Cron, InvalidError, digits_value, parse_cron, quote
from cronrace.timing.zones import DAY_S, EPOCH_ORDINAL, repeat_horizon_s, segment, year_of

__all__ = ["Schedule"]

# Keeping starts within 1000-9000 keeps every search (at most 57 years, see
# zones.repeat_horizon_s) inside what datetime represents.
_MIN_S = (date(1000, 1, 1).toordinal() - EPOCH_ORDINAL) * DAY_S
_MAX_S = (date(9000, 1, 1).toordinal() - EPOCH_ORDINAL) * DAY_S

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
# Longer than any schedule worth writing (a 6-field expression listing every value of every
# field is about 400 characters); longer input is refused before any work is done on it.
_MAX_EXPR_CHARS = 1024
# "@every" ticks must stay far inside what datetime, Redis and Lua's doubles represent.
_MAX_PERIOD_S = 3650 * DAY_S
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
# The longest IANA key is 38 characters (right/America/Argentina/ComodRivadavia); zoneinfo
# imports one package per path component, and a few hundred overflow the stack.
_MAX_ZONE_CHARS = 64
# Real files under the zoneinfo directory that are not zones every node agrees on.
_NOT_ZONES = ("localtime", "posixrules", "Factory")
# What cron dialects offer that cronrace does not, and what to write instead.
_UNSUPPORTED_ALIASES = {
    "@reboot": "cronrace fires on a schedule, not at start-up: run start-up work in your app",
}


def _check_characters(text: str) -> None:
    """Refuse what no cron reads: non-ASCII digits and spaces, control characters."""
    if len(text) > _MAX_EXPR_CHARS:
        raise InvalidError(f"longer than {_MAX_EXPR_CHARS} characters")
    for position, char in enumerate(text):
        if not (" " <= char <= "~" or char == "\t"):
            raise InvalidError(
                f"character {char!r} (U+{ord(char):04X}) at position {position} is not allowed: "
                "use ASCII letters, digits, punctuation and spaces"
            )


def _parse_every(duration: str) -> int:
    match = _DURATION.fullmatch(duration.lower())
    if not duration or match is None:
        raise InvalidError(f"duration {quote(duration)} is not like 90s, 5m, 1h30m or 1d")
    days, hours, minutes, seconds = (digits_value(part or "0") for part in match.groups())
    period_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if period_s < 1:
        raise InvalidError(f"duration {quote(duration)} is shorter than 1s")
    if period_s > _MAX_PERIOD_S:
        raise InvalidError(
            f"duration {quote(duration)} is longer than {_MAX_PERIOD_S // DAY_S}d (10 years)"
        )
    return period_s


def _parse_expression(expr: str, hash_key: str | None) -> Cron | int:
    """Return the cron fields of an expression, or the period of an ``@every``."""
    if not isinstance(expr, str):
        raise InvalidError("it is not a string")
    return _parse_text(expr, hash_key)


@functools.lru_cache(maxsize=1 << 16)
def _parse_text(expr: str, hash_key: str | None) -> Cron | int:
    """:func:`_parse_expression` of a string, remembered: the result is an immutable value
    of its inputs, and every agent of a process parses the same definitions (a benchmark
    process of 100 agents x 10,000 jobs parsed each expression 100 times: 1.4 s an agent).
    Errors are not remembered (they are raised, not returned)."""
    _check_characters(expr)
    words = expr.split()
    if words and words[0].lower() == "@every":
        if len(words) != 2:
            raise InvalidError("expected '@every <duration>', e.g. '@every 5m'")
        return _parse_every(words[1])
    if len(words) == 1 and words[0].startswith("@"):
        alias = words[0].lower()
        if alias not in _ALIASES:
            hint = _UNSUPPORTED_ALIASES.get(alias)
            raise InvalidError(f"unknown alias {quote(words[0])}" + (f": {hint}" if hint else ""))
        return parse_cron(_ALIASES[alias])
    if len(words) == 7:
        raise InvalidError("expected 5 or 6 fields, got 7: a year field (Quartz) is not supported")
    return parse_cron(expr, hash_key)


def _load_zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not _ZONE_KEY.fullmatch(name) or name in _NOT_ZONES:
        raise InvalidError("not an IANA time zone name")
    if len(name) > _MAX_ZONE_CHARS:
        raise InvalidError(f"longer than {_MAX_ZONE_CHARS} characters, the most an IANA name has")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidError("unknown IANA time zone") from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule in a time zone; build one with :meth:`Schedule.parse`.

    Attributes:
        expr: the expression as the user wrote it.
        timezone: the IANA time zone its cron fields are read in.
        hash_key: the job name its ``H`` fields hash (None when it has none): two jobs
            with the same ``H`` expression have different ticks.
    """

    expr: str
    timezone: str
    _zone: ZoneInfo = field(repr=False, compare=False)
    hash_key: str | None = None
    _cron: Cron | None = field(default=None, repr=False, compare=False)
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
            job: name of the job, quoted in the error message; ``H`` fields hash it.
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
        except InvalidError as error:
            raise ScheduleError(
                f"{where}timezone {quote(timezone)} is invalid: {error}", reason=str(error)
            ) from None
        try:
            spec = _parse_expression(expr, job)
        except InvalidError as error:
            raise ScheduleError(
                f"{where}schedule {quote(expr)} is invalid: {error}", reason=str(error)
            ) from None
        if isinstance(spec, int):
            return cls(expr, timezone, zone, _period_s=spec)
        schedule = cls(expr, timezone, zone, job if spec.hashed else None, spec)
        if fires_after_s is not None:
            until_s = repeat_horizon_s(fires_after_s)
            try:
                # Through the cache next_tick reads: a start-up seeds from about the same
                # instant, and agents of one process define the same jobs.
                _next_cron_tick(schedule, fires_after_s)
            except ScheduleError:
                reason = (
                    f"it never fires in {timezone}: every local time it matches falls in a "
                    f"gap where clocks jump forward (searched through {year_of(until_s) - 1} "
                    "with this machine's tzdata)"
                )
                raise ScheduleError(
                    f"{where}schedule {quote(expr)} is invalid: {reason}", reason=reason
                ) from None
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
            offset, previous, end = segment(zone, t)
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


#: Sized for the jobs of one process, as the parse cache is: an LRU smaller than the jobs
#: asked in turn (a node of 10,000 ``H`` jobs seeds each from now) never hits.
@functools.lru_cache(maxsize=1 << 16)
def _next_cron_tick(schedule: Schedule, after_s: int) -> int:
    until_s = repeat_horizon_s(after_s)
    tick = schedule._search(after_s, until_s)
    if tick is None:
        raise ScheduleError(
            f"schedule {quote(schedule.expr)} in {schedule.timezone} never fires after "
            f"{after_s} (searched through {year_of(until_s) - 1})"
        )
    return tick
