"""Where a time zone's UTC offset changes, and how far ahead a search must look.

Pure (docs/design.md section 6): zoneinfo is asked for offsets at instants; nothing reads a
clock. The tick search in :mod:`cronrace.timing.schedule` walks a zone segment by segment, each
a stretch of one UTC offset, and applies the DST rules at the changes between them.
"""

from __future__ import annotations

import bisect
import functools
from datetime import date, datetime
from zoneinfo import ZoneInfo

DAY_S = 86_400
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# Transitions are found by sampling the UTC offset this often and bisecting each change.
# The closest two offset changes in tzdata since 1900 are four days apart (Africa/Freetown,
# 1939), so six hours cannot step over a pair.
_SAMPLE_S = 6 * 3600


def offset_s(zone: ZoneInfo, t: int) -> int:
    """The zone's UTC offset at instant ``t``, in seconds."""
    offset = datetime.fromtimestamp(t, zone).utcoffset()
    assert offset is not None  # an aware datetime always has one
    return offset.days * DAY_S + offset.seconds


def year_start_s(year: int) -> int:
    return (date(year, 1, 1).toordinal() - EPOCH_ORDINAL) * DAY_S


def year_of(t: int) -> int:
    return _year_of_day(t // DAY_S)


@functools.lru_cache(maxsize=4096)
def _year_of_day(day: int) -> int:
    # Every tick search asks (a node of 10,000 jobs: several times per job); a few days
    # are asked at a time.
    return date.fromordinal(EPOCH_ORDINAL + day).year


@functools.lru_cache(maxsize=4096)
def _offset_at_year_start(zone: ZoneInfo, year: int) -> int:
    return offset_s(zone, year_start_s(year))


@functools.lru_cache(maxsize=4096)
def _transitions(zone: ZoneInfo, year: int) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Return one UTC year's offset changes: instants and (before, after) offsets.

    zoneinfo keeps its table private, so offsets are sampled and each change bisected.
    """
    times: list[int] = []
    offsets: list[tuple[int, int]] = []
    end = year_start_s(year + 1) - 1
    t = year_start_s(year) - 1
    before = offset_s(zone, t)
    while t < end:
        probe = min(t + _SAMPLE_S, end)
        if offset_s(zone, probe) == before:
            t = probe
            continue
        low, high = t, probe
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if offset_s(zone, middle) == before else (low, middle)
        after = offset_s(zone, high)
        times.append(high)
        offsets.append((before, after))
        t, before = high, after
    return tuple(times), tuple(offsets)


def segment(zone: ZoneInfo, t: int) -> tuple[int, tuple[int, int, int] | None, int]:
    """Return the offset at t, the last change (at, before, after) up to t, and the next one.

    Without a change within a year, the last is None and the next is a synthetic boundary.
    """
    year = year_of(t)
    times, offsets = _transitions(zone, year)
    i = bisect.bisect_right(times, t)
    if not i:
        times_before, offsets_before = _transitions(zone, year - 1)
        times, offsets, i = times_before + times, offsets_before + offsets, len(times_before)
    previous = (times[i - 1], *offsets[i - 1]) if i else None
    if i == len(times):
        times_after, _ = _transitions(zone, year + 1)
        times += times_after or (year_start_s(year + 2),)
    end = times[i]
    if previous is not None:
        return previous[2], previous, end
    # No change since the start of the year before t's: the offset then holds at t (one
    # cached answer for UTC and fixed-offset zones, not a datetime per search).
    return _offset_at_year_start(zone, year - 1), previous, end


def repeat_horizon_s(after_s: int) -> int:
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
    return _horizon_after_year(year_of(after_s))


@functools.lru_cache(maxsize=256)
def _horizon_after_year(year: int) -> int:
    first = year + 1
    for later in range(first, first + 28):
        if later % 100 == 0 and later % 400 != 0:
            first = later + 1
    # A day more: the horizon is UTC and local years start up to 14 hours off it.
    return year_start_s(first + 28) + DAY_S
