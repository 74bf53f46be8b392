"""Hostile schedule input: one ScheduleError naming the field and the value, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronrace.errors import ScheduleError
from cronrace.timing.schedule import Schedule

NOW_S = 1_767_225_600  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("expr", "timezone", "field", "reason"),
    [
        # Python refuses int() of more than 4,300 digits with a bare ValueError.
        ("1" * 5000 + " * * * *", "UTC", "schedule", "longer than 1024 characters"),
        ("1" * 1000 + " * * * *", "UTC", "schedule", "(1000 characters) out of range 0-59"),
        ("0 0 * * " + "9" * 30, "UTC", "schedule", "day-of-week '999999999"),
        ("*/" + "0" * 900 + " * * * *", "UTC", "schedule", "is not a positive number"),
        ("@every " + "1" * 1000 + "s", "UTC", "schedule", "longer than 3650d"),
        # Non-ASCII digits and spaces: int() and str.split() accept them, cron does not.
        ("@every \uff15m", "UTC", "schedule", "character '\uff15' (U+FF15) at position 7"),
        ("@every\u30005m", "UTC", "schedule", "(U+3000) at position 6"),
        ("0\xa00 * * *", "UTC", "schedule", "(U+00A0) at position 1"),
        ("\u0663 * * * *", "UTC", "schedule", "(U+0663) at position 0"),
        ("* * * * *\x1c", "UTC", "schedule", "(U+001C) at position 9"),
        ("0 0 * * *\n", "UTC", "schedule", "(U+000A) at position 9"),
        # Periods that overflow what a tick can be (datetime, Lua's doubles).
        ("@every 100000000000000000000d", "UTC", "schedule", "longer than 3650d (10 years)"),
        ("@every 3651d", "UTC", "schedule", "longer than 3650d"),
        ("@every 99999999999999999999999h", "UTC", "schedule", "longer than 3650d"),
        # zoneinfo imports one package per path component: hundreds overflow the stack.
        ("@daily", "a" * 1000, "timezone", "longer than 64 characters"),
        ("@daily", "a/" * 500 + "a", "timezone", "longer than 64 characters"),
        ("@daily", "Europe/Berlin\u200b", "timezone", "not an IANA time zone name"),
        ("@daily", "Europe/Ber\u0131in", "timezone", "not an IANA time zone name"),
    ],
)
def test_hostile_input_is_one_schedule_error_naming_job_field_and_value(
    expr: str, timezone: str, field: str, reason: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expr, timezone, job="nightly")
    message = str(caught.value)
    value = expr if field == "schedule" else timezone
    assert message.startswith(f"job 'nightly': {field} {repr(value)[:40]}")
    assert reason in message
    assert "\n" not in message
    assert len(message) < 400


@pytest.mark.parametrize(
    ("expr", "first_tick_s"),
    [
        ("@every 3650d", 3650 * 86_400 * (NOW_S // (3650 * 86_400) + 1)),
        ("0 0 * * *\t", NOW_S + 86_400),
        ("\t0\t0 * * *", NOW_S + 86_400),
        ("0" * 100 + "5 * * * *", NOW_S + 300),
        ("*/" + "9" * 40 + " * * * *", NOW_S + 3600),  # a step wider than the field
    ],
)
def test_edge_input_that_cron_reads_is_accepted(expr: str, first_tick_s: int) -> None:
    assert Schedule.parse(expr, fires_after_s=NOW_S).next_tick(NOW_S) == first_tick_s


# --- arbitrary text -------------------------------------------------------------------------

CRON_CHARS = "0123456789*/,-#?LlWH() \t"
ODD_CHARS = "\uff15\u0663\u3000\xa0\x1c\n\x00\xe9"
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Tehran"]

cron_field = st.one_of(
    st.text(CRON_CHARS, min_size=1, max_size=6),
    st.sampled_from(
        ["*", "*/15", "1-5", "0#2", "5L", "L", "mon-fri", "jan", "?", "H(1-5)/2", "LW"]
    ),
    st.integers(0, 10**30).map(str),
    st.integers(1, 6000).map(lambda digits: "7" * digits),
    st.text(CRON_CHARS + ODD_CHARS, min_size=1, max_size=4),
)
separator = st.sampled_from([" ", "  ", "\t", "\u3000", "\xa0", "\x1c", "\n"])


@st.composite
def cron_like(draw: st.DrawFn) -> str:
    fields = draw(st.lists(cron_field, min_size=4, max_size=7))
    text = fields[0]
    for item in fields[1:]:
        text += draw(st.one_of(st.just(" "), separator)) + item
    return text


expressions = st.one_of(
    st.text(max_size=40),
    cron_like(),
    st.tuples(
        st.sampled_from(["@every ", "@EVERY ", "@every", "@daily", "@"]),
        st.text("0123456789dhms" + ODD_CHARS, max_size=30),
    ).map("".join),
)
zones = st.one_of(
    st.sampled_from(ZONES),
    st.text(max_size=30),
    st.text("abcXYZ/_+-.", max_size=100),
    st.integers(1, 600).map(lambda depth: "a/" * depth + "a"),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, zones, st.integers(NOW_S - 10 * 365 * 86_400, NOW_S + 50 * 365 * 86_400))
def test_arbitrary_text_raises_nothing_but_schedule_error(
    expr: str, timezone: str, after_s: int
) -> None:
    try:
        schedule = Schedule.parse(expr, timezone, job="fuzz")
        tick_s = schedule.next_tick(after_s)
    except ScheduleError as error:
        message = str(error)
    else:
        message = ""
    if message:
        event("refused")
        assert "\n" not in message
        assert message.startswith("job 'fuzz': ") or "never fires" in message
        return
    event("accepted")
    assert all(" " <= char <= "~" or char == "\t" for char in expr), "only ASCII is read"
    assert tick_s > after_s
