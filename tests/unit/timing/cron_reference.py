"""A brute-force reference evaluator of cron expressions, written for reading, not speed.

It shares no code with cronrace: fields are expanded by spelling out each rule, days are
matched with ``datetime.date``, and time is scanned instant by instant in UTC with only
zoneinfo's answer for each instant. Vocabulary: numbers, names, ``*``, ``?``, ranges
(wrapping ones too), steps, ``H`` in all its forms, ``L``, ``nW``, ``LW``, ``nL``, ``n#k``.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# (name, low, high, bare-H high) of the six fields, seconds first.
FIELDS = [
    ("second", 0, 59, 59),
    ("minute", 0, 59, 59),
    ("hour", 0, 23, 23),
    ("day-of-month", 1, 31, 28),
    ("month", 1, 12, 12),
    ("day-of-week", 0, 7, 6),
]


def stable_hash(key: str, field: str) -> int:
    """The documented H hash: the first 8 bytes of BLAKE2b("<field>:<key>"), big-endian."""
    return int.from_bytes(hashlib.blake2b(f"{field}:{key}".encode(), digest_size=8).digest())


def number(text: str, low: int) -> int:
    lowered = text.lower()
    if low == 1 and lowered in MONTHS:
        return MONTHS.index(lowered) + 1
    if low == 0 and lowered in DAYS:
        return DAYS.index(lowered)
    return int(text)


def walk(start: int, end: int, low: int, high: int, week: bool) -> list[int]:
    """Values from start to end in field order, going round the end of the field if needed."""
    if start <= end:
        return list(range(start, end + 1))
    if week:  # the week has seven days: 7 is Sunday again
        start, end, high = start % 7, end % 7, 6
    out, value = [start], start
    while value != end:
        value = low if value == high else value + 1
        out.append(value)
    return out


@functools.cache
def expand(text: str, index: int, key: str) -> set[int]:
    """The plain values of one field (special day items are read by ``day_rules``)."""
    name, low, high, hash_high = FIELDS[index]
    week = name == "day-of-week"
    values: set[int] = set()
    for item in text.split(","):
        if index == 3 and (item.upper() in ("L", "LW") or item.upper().endswith("W")):
            continue
        if index == 5 and ("#" in item or item.upper().endswith("L")):
            continue
        base, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if base.upper().startswith("H"):
            if base[1:]:
                first, last = base[2:-1].split("-")
                span = walk(number(first, low), number(last, low), low, high, week)
            else:
                span = list(range(low, hash_high + 1))
            if week:
                span = list(dict.fromkeys(value % 7 for value in span))
            h = stable_hash(key, name)
            # A step wider than the span picks one value, as cronie caps wide steps.
            step = min(step, len(span))
            picked = [span[h % len(span)]] if not step_text else span[h % step :: step]
            values.update(picked)
            continue
        if base in ("*", "?"):
            span = list(range(low, high + 1))
        elif "-" in base:
            first, last = base.split("-")
            span = walk(number(first, low), number(last, low), low, high, week)
        else:
            start = number(base, low)
            span = list(range(start, high + 1)) if step_text else [start]
        values.update(span[::step])
    return {value % 7 for value in values} if week else values


def weekdays_of(day: date) -> list[date]:
    """Monday to Friday of the month of ``day``."""
    return _weekdays(day.year, day.month)


@functools.cache
def _weekdays(year: int, month: int) -> list[date]:
    length = calendar.monthrange(year, month)[1]
    every = [date(year, month, n) for n in range(1, length + 1)]
    return [d for d in every if d.weekday() < 5]


@functools.cache
def day_matches(dom: str, dow: str, day: date, key: str) -> bool:
    length = calendar.monthrange(day.year, day.month)[1]
    dom_ok = day.day in expand(dom, 3, key)
    for item in dom.split(","):
        upper = item.upper()
        if upper == "L":
            dom_ok |= day.day == length
        elif upper == "LW":
            dom_ok |= day == weekdays_of(day)[-1]
        elif upper.endswith("W") and int(upper[:-1]) <= length:
            wanted = int(upper[:-1])
            # The weekday of the same month closest to the wanted day.
            nearest = min(weekdays_of(day), key=lambda d: abs(d.day - wanted))
            dom_ok |= day == nearest
    weekday = day.isoweekday() % 7
    dow_ok = weekday in expand(dow, 5, key)
    for item in dow.split(","):
        if "#" in item:
            wanted_day, _, nth = item.partition("#")
            dow_ok |= number(wanted_day, 0) % 7 == weekday and (day.day - 1) // 7 + 1 == int(nth)
        elif item.upper().endswith("L") and len(item) > 1:
            dow_ok |= number(item[:-1], 0) % 7 == weekday and day.day + 7 > length
    both = dom.startswith(("*", "?")) or dow.startswith(("*", "?"))
    return dom_ok and dow_ok if both else dom_ok or dow_ok


def reference_ticks(
    expr: str, zone_name: str, after_s: int, until_s: int, key: str = "job"
) -> list[int]:
    """Scan every second (6 fields) or minute (5 fields) in UTC and apply the cronie rules.

    A fixed-time job (minute and hour not starting with '*') skips the second occurrence
    of a wall time (fold=1) and fires at a forward jump when one of the wall times the jump
    skipped matches. Quarter hours whose local date or hour does not match and that hold
    no offset change are stepped over whole: local dates, hours and offsets change only on
    UTC quarter hours (every offset in use is a multiple of 15 minutes).
    """
    fields = expr.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    _, minute, hour, dom, _, dow = fields
    sets = [expand(text, index, key) for index, text in enumerate(fields) if index != 3]
    seconds, minutes, hours, months = sets[0], sets[1], sets[2], sets[3]
    fixed = not minute.startswith("*") and not hour.startswith("*")
    zone = ZoneInfo(zone_name)

    def day_ok(wall: datetime) -> bool:
        return wall.month in months and day_matches(dom, dow, wall.date(), key)

    def matches(wall: datetime) -> bool:
        return (
            wall.second in seconds
            and wall.minute in minutes
            and wall.hour in hours
            and day_ok(wall)
        )

    step = 1 if len(expr.split()) == 6 else 60
    ticks = []
    t = (after_s // step + 1) * step
    while t <= until_s:
        wall = datetime.fromtimestamp(t, zone)
        block_end = (t // 900 + 1) * 900
        if (
            not (day_ok(wall) and wall.hour in hours)
            and wall.utcoffset()
            == datetime.fromtimestamp(block_end - 1, zone).utcoffset()
            == datetime.fromtimestamp(t - step, zone).utcoffset()
        ):
            t = block_end
            continue
        if matches(wall) and (wall.fold == 0 or not fixed):
            ticks.append(t)
        elif fixed:
            # A forward jump at t skipped the wall times between the previous step and now.
            skipped = datetime.fromtimestamp(t - step, zone).replace(tzinfo=None)
            skipped += timedelta(seconds=step)
            while skipped < wall.replace(tzinfo=None):
                if matches(skipped):
                    ticks.append(t)
                    break
                skipped += timedelta(seconds=step)
        t += step
    return ticks
