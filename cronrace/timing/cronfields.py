"""The cron language: the text of each field read into the values it matches.

Pure and clock-free (docs/design.md section 6). A field is a comma-separated list of items:

- ``*``, ``?`` (day fields), a number or a name (``jan``, ``mon``), ``a-b`` and steps
  ``a-b/n``, ``*/n``, ``a/n`` as in cronie;
- a range whose start is past its end wraps through the end of the field: ``fri-mon``,
  ``22-2``, ``50-10/5`` (steps continue across the wrap: 50, 55, 0, 5, 10);
- ``H`` (hash, as in Jenkins): one value chosen by a stable hash of the job's name and the
  field, so every node computes the same one and many jobs spread over the field.
  ``H(a-b)`` chooses within a range, ``H/n`` and ``H(a-b)/n`` choose the offset of a step.
  Bare ``H`` and ``H/n`` use 1-28 for the day of the month (so it fires every month) and
  0-6 for the day of the week;
- day of month: ``L`` (last day), ``15W`` (the weekday nearest the 15th, never crossing
  into another month), ``LW`` (the last weekday);
- day of week: ``5L`` (the last Friday), ``1#2`` (the second Monday).
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from datetime import date
from typing import TypeVar

_DAY_S = 86_400
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Beyond 18 digits a number is out of every range; int() of thousands of digits is refused
# by Python itself (a bare ValueError), so long digit strings never reach it.
_MAX_DIGITS = 18
HUGE = 10**_MAX_DIGITS
_SATURDAY, _SUNDAY = 6, 0


class InvalidError(Exception):
    """One-line reason an expression is invalid, completed with job and value by the caller."""


def quote(value: object, limit: int = 60) -> str:
    """Quote a value for an error line; a long one is cut, and its length said."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}...{size}"


def digits_value(digits: str) -> int:
    """Return the value of an ASCII digit string, or ``HUGE`` for one beyond every range."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= _MAX_DIGITS else HUGE


def hash_value(key: str, field_name: str) -> int:
    """Return the stable 64-bit hash ``H`` uses for one field of one job.

    BLAKE2b of ``<field>:<key>``: the same on every node, Python version and run (Python's
    ``hash()`` of a string changes with every process). Changing it moves every ``H`` job.
    """
    digest = hashlib.blake2b(f"{field_name}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One cron field: its name, its range, its names, and the range bare ``H`` uses."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] spells the value low + i
    hash_high: int | None = None  # bare H stays at or below this (day fields)

    @property
    def cycle(self) -> int:
        """How many distinct values the field has (7 weekdays: 7 is Sunday again)."""
        return 7 if self is DOW else self.high - self.low + 1


SECOND = FieldSpec("second", 0, 59)
MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DOM = FieldSpec("day-of-month", 1, 31, hash_high=28)
MONTH = FieldSpec("month", 1, 12, _MONTH_NAMES)
DOW = FieldSpec("day-of-week", 0, 7, _DAY_NAMES, hash_high=6)  # 0 and 7 are both Sunday


def month_len(year: int, month: int) -> int:
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return MONTH_DAYS[month] + leap


def _nearest_weekday(day: int, weekday_of_day: int, length: int) -> int:
    """The weekday nearest ``day`` in a month of ``length`` days, inside that month."""
    if weekday_of_day == _SATURDAY:
        return day - 1 if day > 1 else day + 2
    if weekday_of_day == _SUNDAY:
        return day + 1 if day < length else day - 2
    return day


@dataclass(frozen=True, slots=True)
class Cron:
    """Expanded cron fields plus the flags that change their meaning."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    last_day: bool
    nearest_weekdays: frozenset[int]  # 15 for 15W; 0 for LW (the last weekday)
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    nth_weekdays: frozenset[tuple[int, int]]  # (weekday, n), n == -1 for the last one
    days_and: bool
    fixed_time: bool
    hashed: bool  # some field uses H: the ticks depend on the job's name

    def day_matches(self, day: int, weekday: int, length: int) -> bool:
        dom = day in self.days or (self.last_day and day == length)
        if not dom and self.nearest_weekdays:
            for wanted in self.nearest_weekdays:
                target = wanted or length
                if target <= length and day == _nearest_weekday(
                    target, (weekday + target - day) % 7, length
                ):
                    dom = True
                    break
        dow = (
            weekday in self.weekdays
            or (weekday, (day + 6) // 7) in self.nth_weekdays
            or ((weekday, -1) in self.nth_weekdays and day + 7 > length)
        )
        return dom and dow if self.days_and else dom or dow

    def fires_ever(self) -> bool:
        # Every (month, day, weekday, month length) combination occurs in the 400-year
        # Gregorian cycle, so matching one of them means the schedule fires.
        return any(
            self.day_matches(day, weekday, length)
            for month in self.months
            for length in ((28, 29) if month == 2 else (MONTH_DAYS[month],))
            for day in range(1, length + 1)
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
            if self.day_matches(d.day, d.isoweekday() % 7, month_len(d.year, d.month)):
                found = self.next_second_of_day(second_of_day)
                if found is not None:
                    wall = day * _DAY_S + found
                    return wall if wall < high else None
            day, second_of_day = day + 1, 0
        return None


class _FieldReader:
    """Reads the items of one field; ``hash_key`` is the job name ``H`` hashes."""

    def __init__(self, spec: FieldSpec, hash_key: str | None) -> None:
        self.spec = spec
        self.hash_key = hash_key
        self.values: set[int] = set()
        self.nth: set[tuple[int, int]] = set()
        self.nearest: set[int] = set()
        self.last_day = False
        self.hashed = False

    def number(self, token: str, item: str) -> int:
        spec = self.spec
        if token.lower() in spec.names:
            return spec.names.index(token.lower()) + spec.low
        if not token:
            raise InvalidError(f"{spec.name} {quote(item)}: a number is missing")
        if not (token.isascii() and token.isdigit()):
            kind = "a number or name" if spec.names else "a number"
            raise InvalidError(f"{spec.name} {quote(token)} is not {kind}")
        value = digits_value(token)
        if not spec.low <= value <= spec.high:
            shown = value if value < HUGE else quote(token)
            raise InvalidError(f"{spec.name} {shown} out of range {spec.low}-{spec.high}")
        return value

    def step(self, text: str) -> int:
        if not (text.isascii() and text.isdigit()) or not any(digit != "0" for digit in text):
            raise InvalidError(f"{self.spec.name} step {quote(text)} is not a positive number")
        return digits_value(text)

    def span(self, start: int, end: int) -> list[int]:
        """The values from ``start`` to ``end``, wrapping through the end of the field."""
        spec = self.spec
        if start <= end:
            return list(range(start, end + 1))
        # A range running past the field's end continues at its start: fri-mon, 22-2.
        cycle = spec.cycle
        count = (end - start) % cycle + 1
        return [spec.low + (start - spec.low + k) % cycle for k in range(count)]

    def read(self, text: str) -> None:
        for item in text.split(","):
            if not item:
                raise InvalidError(f"{self.spec.name} list {quote(text)} has an empty item")
            base, slash, step_text = item.partition("/")
            if self.special(item, base, slash):
                continue
            step = self.step(step_text) if slash else 1
            if base[:1] in ("H", "h"):
                self.read_hash(item, base, step if slash else None)
                continue
            if base == "*" or (base == "?" and self.spec in (DOM, DOW)):
                span = list(range(self.spec.low, self.spec.high + 1))
            elif "-" in base:
                span = self.read_range(item, base)
            else:
                start = self.number(base, item)
                span = list(range(start, self.spec.high + 1 if slash else start + 1))
            # A step beyond the span picks its first value only, as in cronie.
            self.values.update(span[:: min(step, len(span))])

    def read_range(self, item: str, base: str) -> list[int]:
        name = self.spec.name
        start_text, _, end_text = base.partition("-")
        if start_text in ("*", "?"):
            raise InvalidError(
                f"{name} {quote(item)}: {start_text!r} cannot start a range: write */N for "
                f"every N, or a range of numbers such as {self.spec.low}-{end_text or 5}"
            )
        if not start_text:
            raise InvalidError(
                f"{name} {quote(item)}: a range needs a start (numbers are never negative), "
                f"e.g. {self.spec.low}-{end_text}"
            )
        if "-" in end_text:
            raise InvalidError(f"{name} {quote(item)}: a range has one '-', e.g. 1-5")
        if not end_text:
            raise InvalidError(
                f"{name} {quote(item)}: a range needs an end, e.g. {start_text}-{self.spec.high}"
            )
        return self.span(self.number(start_text, item), self.number(end_text, item))

    def read_hash(self, item: str, base: str, step: int | None) -> None:
        spec, name = self.spec, self.spec.name
        if self.hash_key is None:
            raise InvalidError(
                f"{name} {quote(item)}: H needs the name of the job it hashes (give job=...)"
            )
        rest = base[1:]
        if not rest:
            span = list(range(spec.low, (spec.hash_high or spec.high) + 1))
        elif rest[0] == "(" and rest[-1] == ")" and "-" in rest:
            start_text, _, end_text = rest[1:-1].partition("-")
            if not start_text or not end_text or "-" in end_text:
                raise InvalidError(f"{name} {quote(item)}: write H(low-high), e.g. H(0-29)")
            span = self.span(self.number(start_text, item), self.number(end_text, item))
        else:
            raise InvalidError(
                f"{name} {quote(item)}: write H, H/step, H(low-high) or H(low-high)/step, "
                "e.g. H(0-29)/10"
            )
        self.hashed = True
        if spec is DOW:
            span = list(dict.fromkeys(value % 7 for value in span))  # 0-7 is seven days
        hashed = hash_value(self.hash_key, name)
        if step is None:
            self.values.add(span[hashed % len(span)])
            return
        step = min(step, len(span))
        self.values.update(span[hashed % step :: step])

    def special(self, item: str, base: str, slash: str) -> bool:
        """Read the day fields' own items (L, W, LW, #, 5L); False for anything else."""
        spec, upper = self.spec, base.upper()
        if spec is DOM and upper.startswith("L") and upper not in ("L", "LW"):
            raise InvalidError(
                f"{spec.name} {quote(item)}: only L (the last day) and LW (the last weekday) "
                "are supported; offsets such as L-3 are not"
            )
        if spec is DOM and upper.endswith("W"):
            if slash or not (upper == "LW" or upper[:-1].isdigit()):
                raise InvalidError(
                    f"{spec.name} {quote(item)}: W takes one day, e.g. 15W (the weekday "
                    "nearest the 15th) or LW (the last weekday)"
                )
            self.nearest.add(0 if upper == "LW" else self.number(upper[:-1], item))
            return True
        if spec is DOM and upper == "L":
            if slash:
                raise InvalidError(f"{spec.name} {quote(item)}: L takes no step")
            self.last_day = True
            return True
        if spec is DOW and "#" in item:
            weekday, _, which = item.partition("#")
            if which not in ("1", "2", "3", "4", "5"):
                raise InvalidError(f"{spec.name} {quote(item)}: the week after '#' must be 1-5")
            self.nth.add((self.number(weekday, item) % 7, int(which)))
            return True
        if spec is DOW and len(item) > 1 and item[-1] in "lL":
            self.nth.add((self.number(item[:-1], item) % 7, -1))
            return True
        if spec is DOW and upper.startswith("L") and upper[1:].isdigit():
            raise InvalidError(
                f"{spec.name} {quote(item)}: write the day first, e.g. {upper[1:]}L for the "
                "last one of the month"
            )
        return False


def _read(text: str, spec: FieldSpec, hash_key: str | None) -> _FieldReader:
    reader = _FieldReader(spec, hash_key)
    reader.read(text)
    if spec is DOW:
        reader.values = {value % 7 for value in reader.values}
    return reader


def parse_cron(text: str, hash_key: str | None = None) -> Cron:
    """Read a 5-field (or seconds-first 6-field) cron expression.

    Args:
        text: the fields, separated by blanks.
        hash_key: the job name ``H`` hashes; None refuses ``H``.

    Raises:
        InvalidError: the one-line reason, naming the field and the value.
    """
    fields = text.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    elif len(fields) != 6:
        raise InvalidError(f"expected 5 or 6 fields, got {len(fields)}")
    _, minute, hour, dom, _, dow = fields
    readers = [
        _read(field, spec, hash_key)
        for field, spec in zip(fields, (SECOND, MINUTE, HOUR, DOM, MONTH, DOW), strict=True)
    ]
    days, weekdays = readers[3], readers[5]
    cron = Cron(
        seconds=_shared(tuple(sorted(readers[0].values))),
        minutes=_shared(tuple(sorted(readers[1].values))),
        hours=_shared(tuple(sorted(readers[2].values))),
        days=_shared(frozenset(days.values)),
        last_day=days.last_day,
        nearest_weekdays=_shared(frozenset(days.nearest)),
        months=_shared(frozenset(readers[4].values)),
        weekdays=_shared(frozenset(weekdays.values)),
        nth_weekdays=_shared(frozenset(weekdays.nth)),
        # cronie's rule: a field beginning with '*' counts as unrestricted.
        days_and=dom.startswith(("*", "?")) or dow.startswith(("*", "?")),
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
        hashed=any(reader.hashed for reader in readers),
    )
    if not cron.fires_ever():
        raise InvalidError("it never fires: no date matches its day and month fields")
    return _shared(cron)


#: Equal field values (and equal Crons) shared between schedules: 10,000 stored schedules
#: mostly repeat a few dozen, and a frozenset of 31 days costs a kilobyte. Bounded.
_SHARED: dict[object, object] = {}
_SHARED_MAX = 20_000
_T = TypeVar("_T")


def _shared(value: _T) -> _T:
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    return _SHARED.setdefault(value, value)  # type: ignore[return-value]
