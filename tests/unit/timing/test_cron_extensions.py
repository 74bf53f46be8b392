"""H (hash), W (nearest weekday), LW and wrapping ranges: tables, properties, a reference."""

from __future__ import annotations

import collections
import itertools
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronrace.errors import ScheduleError
from cronrace.timing.schedule import Schedule
from tests.unit.timing.cron_reference import day_matches, expand, reference_ticks
from tests.unit.timing.test_schedule import ZONES, starts

FAR_S = 10**10
JUNE_2024_S = int(datetime(2024, 6, 1, tzinfo=UTC).timestamp())


def iso(tick_s: int, zone: str = "UTC") -> str:
    return datetime.fromtimestamp(tick_s, ZoneInfo(zone)).isoformat()


def first(expr: str, count: int, *, job: str = "cleanup", zone: str = "UTC") -> list[str]:
    schedule = Schedule.parse(expr, zone, job=job)
    return [iso(t, zone) for t in schedule.ticks_between(JUNE_2024_S, FAR_S, count)]


# --- H -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # Pinned: the hash is part of the contract. A change here moves every H job of
        # every user, so it must be a deliberate, announced change.
        ("H * * * *", ["00:14", "01:14", "02:14"]),
        ("H/15 * * * *", ["00:14", "00:29", "00:44"]),
        ("H(0-29)/10 * * * *", ["00:04", "00:14", "00:24", "01:04"]),
        ("H H * * *", ["16:14"]),
        ("H * * * * *", ["00:00:11", "00:01:11"]),
    ],
)
def test_hash_picks_the_pinned_values_for_a_job_name(expr: str, expected: list[str]) -> None:
    got = first(expr, len(expected))
    assert [text[11 : 11 + len(wanted)] for text, wanted in zip(got, expected, strict=True)] == (
        expected
    )


def test_hash_in_day_fields_stays_where_every_month_and_week_has_it() -> None:
    days = collections.Counter()
    weekdays = collections.Counter()
    for index in range(700):
        name = f"report-{index}"
        day = Schedule.parse("0 0 H * *", job=name).next_tick(JUNE_2024_S)
        weekday = Schedule.parse("0 0 * * H", job=name).next_tick(JUNE_2024_S)
        days[datetime.fromtimestamp(day, UTC).day] += 1
        weekdays[datetime.fromtimestamp(weekday, UTC).isoweekday() % 7] += 1
    assert set(days) == set(range(1, 29))  # 1-28: a day every month has
    assert set(weekdays) == set(range(7))


def test_thousands_of_hashed_jobs_spread_over_the_hour() -> None:
    minutes = collections.Counter(
        datetime.fromtimestamp(
            Schedule.parse("H * * * *", job=f"customer-{index}.report").next_tick(JUNE_2024_S),
            UTC,
        ).minute
        for index in range(3000)
    )
    # 50 a minute on average; a uniform hash stays within +-50% (about 3.5 standard
    # deviations), where ":00 for everyone" would put all 3000 in one minute.
    assert len(minutes) == 60
    assert 25 <= min(minutes.values()) <= max(minutes.values()) <= 75


def test_hashed_minute_and_hour_are_chosen_independently() -> None:
    pairs = {
        tuple(
            datetime.fromtimestamp(
                Schedule.parse("H H * * *", job=f"job-{index}").next_tick(JUNE_2024_S), UTC
            ).timetuple()[3:5]
        )
        for index in range(500)
    }
    hours = {hour for hour, _ in pairs}
    assert len(hours) == 24
    assert len(pairs) > 400  # not one minute per hour: the fields hash separately


def test_every_process_computes_the_same_hashed_tick() -> None:
    # Python's own hash() of a string changes with PYTHONHASHSEED; H must not.
    code = (
        "from cronrace.timing.schedule import Schedule;"
        f"print(Schedule.parse('H H * * *', job='nightly').next_tick({JUNE_2024_S}))"
    )
    # This process hashes strings with another seed (random, or the one it was given).
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    answer = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert answer == f"{Schedule.parse('H H * * *', job='nightly').next_tick(JUNE_2024_S)}\n"


def test_same_hashed_expression_means_different_ticks_for_different_jobs() -> None:
    a = Schedule.parse("H * * * *", job="a")
    b = Schedule.parse("H * * * *", job="b")
    assert a.hash_key == "a"
    assert a != b
    assert a.next_tick(JUNE_2024_S) != b.next_tick(JUNE_2024_S)
    assert Schedule.parse("0 * * * *", job="a") == Schedule.parse("0 * * * *", job="b")
    assert Schedule.parse("0 * * * *", job="a").hash_key is None


def test_hashed_range_and_step_stay_inside_the_range() -> None:
    for index in range(300):
        schedule = Schedule.parse("H(10-19)/3 H(22-2) * * *", job=f"j{index}")
        ticks = schedule.ticks_between(JUNE_2024_S, JUNE_2024_S + 2 * 86_400, 100)
        walls = [datetime.fromtimestamp(t, UTC) for t in ticks]
        minutes = sorted({wall.minute for wall in walls})
        assert all(10 <= minute <= 19 for minute in minutes)
        assert minutes[0] <= 12
        assert [b - a for a, b in itertools.pairwise(minutes)] == [3] * (len(minutes) - 1)
        assert len({wall.hour for wall in walls}) == 1
        assert walls[0].hour in (22, 23, 0, 1, 2)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("H * * * *", "minute 'H': H needs the name of the job it hashes"),
    ],
)
def test_hash_without_a_job_name_is_refused(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError, match=reason):
        Schedule.parse(expr)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("H(0-29 * * * *", "minute 'H(0-29': write H, H/step, H(low-high) or H(low-high)/step"),
        ("H(0-70) * * * *", "minute 70 out of range 0-59"),
        ("H(5) * * * *", "minute 'H(5)': write H, H/step"),
        ("H(-5) * * * *", "minute 'H(-5)': write H(low-high), e.g. H(0-29)"),
        ("H(0-5-9) * * * *", "minute 'H(0-5-9)': write H(low-high)"),
        ("H() * * * *", "minute 'H()': write H, H/step"),
        ("Hx * * * *", "minute 'Hx': write H, H/step"),
        ("H/0 * * * *", "minute step '0' is not a positive number"),
        ("0 0 H(0-5) * *", "day-of-month 0 out of range 1-31"),
        ("0 0 * * H(1-8)", "day-of-week 8 out of range 0-7"),
    ],
)
def test_bad_hash_forms_are_refused_naming_field_and_value(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expr, job="cleanup")
    message = str(caught.value)
    assert message.startswith(f"job 'cleanup': schedule {expr!r} is invalid: ")
    assert reason in message


# --- W, LW -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "after", "expected_days"),
    [
        # 2024-06-15 is a Saturday: the Friday before.
        ("0 0 15W * *", "2024-06-01", ["2024-06-14", "2024-07-15", "2024-08-15"]),
        # 2024-09-15 is a Sunday: the Monday after.
        ("0 0 15W * *", "2024-09-01", ["2024-09-16", "2024-10-15"]),
        # 2024-06-01 is a Saturday: Monday the 3rd, never Friday 31 May.
        ("0 0 1W * *", "2024-05-15", ["2024-06-03", "2024-07-01"]),
        # 2024-03-31 is a Sunday: Friday the 29th, never Monday 1 April.
        ("0 0 31W * *", "2024-03-01", ["2024-03-29", "2024-05-31", "2024-07-31"]),
        # August 2024 ends on a Saturday, November 2024 on a Saturday, March 2024 on Sunday.
        ("0 0 LW * *", "2024-08-01", ["2024-08-30", "2024-09-30", "2024-10-31", "2024-11-29"]),
        ("0 0 1W,15W * *", "2024-06-01", ["2024-06-03", "2024-06-14", "2024-07-01"]),
        # Both day fields restricted: OR, as for plain days (cronie).
        ("0 0 15W * mon", "2024-06-01", ["2024-06-03", "2024-06-10", "2024-06-14"]),
    ],
)
def test_nearest_weekday_stays_inside_the_month(
    expr: str, after: str, expected_days: list[str]
) -> None:
    after_s = int(datetime.fromisoformat(after).replace(tzinfo=UTC).timestamp())
    ticks = Schedule.parse(expr).ticks_between(after_s, FAR_S, len(expected_days))
    assert [iso(t)[:10] for t in ticks] == expected_days


def test_every_nearest_weekday_of_seven_years_matches_the_reference() -> None:
    start_s = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp())
    end_s = int(datetime(2031, 1, 1, tzinfo=UTC).timestamp())
    for day in [*(f"{n}W" for n in range(1, 32)), "LW"]:
        ours = Schedule.parse(f"0 0 {day} * *").ticks_between(start_s - 1, end_s - 1, 1000)
        expected = [
            start_s + offset * 86_400
            for offset in range((end_s - start_s) // 86_400)
            if day_matches(day, "*", date(2024, 1, 1) + timedelta(offset), "")
        ]
        assert ours == expected, day


@pytest.mark.parametrize("expr", ["0 0 LW * *", "0 12 L * *", "0 9 LW 2 *"])
@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "Pacific/Apia"])
def test_last_day_and_last_weekday_match_cronsim(expr: str, zone: str) -> None:
    start = datetime(2011, 1, 1, tzinfo=ZoneInfo(zone))
    ours = Schedule.parse(expr, zone).ticks_between(int(start.timestamp()), FAR_S, 40)
    oracle = []
    for local_time in CronSim(expr, start):
        oracle.append(int(local_time.timestamp()))
        if len(oracle) == 40:
            break
    assert ours == oracle


# --- wrapping ranges -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "field", "values"),
    [
        ("0 0 * * sat-sun", "weekday", {6, 0}),
        ("0 0 * * fri-mon", "weekday", {5, 6, 0, 1}),
        ("0 0 * * 7-1", "weekday", {0, 1}),
        ("0 0 * * 5-1/2", "weekday", {5, 0}),  # Friday, then two days on: Sunday
        ("0 22-2 * * *", "hour", {22, 23, 0, 1, 2}),
        ("50-10/5 * * * *", "minute", {50, 55, 0, 5, 10}),
        ("52-10/5 * * * *", "minute", {52, 57, 2, 7}),  # the step goes on across the wrap
        ("0 0 30-2 * *", "day", {30, 31, 1, 2}),
        ("0 0 1 nov-feb *", "month", {11, 12, 1, 2}),
    ],
)
def test_a_range_whose_start_is_past_its_end_wraps_round(
    expr: str, field: str, values: set[int]
) -> None:
    ticks = Schedule.parse(expr).ticks_between(JUNE_2024_S, JUNE_2024_S + 400 * 86_400, 5000)
    walls = [datetime.fromtimestamp(t, UTC) for t in ticks]
    read = {
        "weekday": lambda wall: wall.isoweekday() % 7,
        "hour": lambda wall: wall.hour,
        "minute": lambda wall: wall.minute,
        "day": lambda wall: wall.day,
        "month": lambda wall: wall.month,
    }[field]
    assert {read(wall) for wall in walls} == values


@pytest.mark.parametrize(
    ("field", "low", "high", "template"),
    [
        ("weekday", 0, 7, "0 0 * * {}"),
        ("hour", 0, 23, "0 {} * * *"),
    ],
)
def test_every_range_and_step_of_a_field_matches_the_reference(
    field: str, low: int, high: int, template: str
) -> None:
    week = field == "weekday"
    for start, end, step in itertools.product(
        range(low, high + 1), range(low, high + 1), (1, 2, 5)
    ):
        text = f"{start}-{end}/{step}"
        ticks = Schedule.parse(template.format(text)).ticks_between(
            JUNE_2024_S, JUNE_2024_S + (7 if week else 1) * 86_400, 200
        )
        walls = [datetime.fromtimestamp(t, UTC) for t in ticks]
        got = {wall.isoweekday() % 7 if week else wall.hour for wall in walls}
        assert got == expand(text, 5 if week else 2, ""), text


# --- property: the whole vocabulary against the reference ------------------------------------


def items(low: int, high: int, *, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    number = st.integers(low, high).map(str)
    if names:
        number = st.one_of(number, st.sampled_from(names))
    step = st.integers(1, (high - low) // 2 + 2).map(str)
    pair = st.tuples(number, number).map("-".join)  # either order: wrapping ranges too
    return st.one_of(
        number,
        pair,
        st.tuples(pair, step).map("/".join),
        st.just("H"),
        step.map(lambda n: f"H/{n}"),
        pair.map(lambda text: f"H({text})"),
        st.tuples(pair, step).map(lambda p: f"H({p[0]})/{p[1]}"),
    )


def field_text(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join), st.just("*/7")
    )


day_items = st.one_of(
    items(1, 31),
    st.sampled_from(["L", "LW", "1W", "15W", "30W", "31W"]),
    st.integers(1, 31).map(lambda day: f"{day}W"),
)
weekday_items = st.one_of(
    items(0, 7, names=("sun", "mon", "fri", "sat")),
    st.sampled_from(["5L", "1#2", "0#1", "sat#5"]),
)


def time_text(low: int, high: int) -> st.SearchStrategy[str]:
    # Half the time one value, so that a few ticks span days and the day rules are seen.
    return st.one_of(field_text(items(low, high)), st.integers(low, high).map(str), st.just("H"))


extended_expressions = st.tuples(
    time_text(0, 59),
    time_text(0, 23),
    st.one_of(st.just("*"), st.just("*"), field_text(day_items)),
    st.one_of(st.just("*"), st.just("*"), field_text(items(1, 12, names=("jan", "nov")))),
    st.one_of(st.just("*"), field_text(weekday_items)),
).map(" ".join)


@st.composite
def extended_cases(draw: st.DrawFn) -> tuple[str, str, int, str]:
    zone = draw(st.sampled_from(ZONES))
    name = draw(st.from_regex(r"[a-z][a-z0-9._-]{0,12}", fullmatch=True))
    return draw(extended_expressions), zone, draw(starts(zone)), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extended_cases())
def test_hash_weekday_and_wrapping_ticks_match_the_reference(
    case: tuple[str, str, int, str],
) -> None:
    expr, zone, after_s, name = case
    try:
        schedule = Schedule.parse(expr, zone, job=name)
    except ScheduleError as error:
        # Only a schedule that never fires is refused; the generator writes valid items.
        refused = str(error)
        event("refused: never fires")
        assert "never fires" in refused
        return
    ours = schedule.ticks_between(after_s, FAR_S, 8)
    until_s = min(ours[-1], after_s + 62 * 86_400)
    event(f"oracle: reference ({'H' if 'H' in expr else 'no H'})")
    expected = reference_ticks(expr, zone, after_s, until_s, key=name)
    assert [t for t in ours if t <= until_s] == expected
