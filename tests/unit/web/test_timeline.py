"""The status page's run timeline: one SVG slot per run, late, long and failed at a glance."""

from __future__ import annotations

import re

import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.operate.fleetview import FleetView
from cronrace.web import timeline
from cronrace.web.statuspage import render

T0 = 1_700_000_000
HOSTILE = '<img src=x onerror="alert(1)">'


def ran(
    tick_s: int, outcome: Outcome, lag_s: float, duration_s: float, **extra: object
) -> RunRecord:
    started_ms = int((tick_s + lag_s) * 1000)
    return RunRecord(
        "job",
        tick_s,
        "n",
        outcome,
        1,
        started_ms,
        started_ms + int(duration_s * 1000),
        **extra,  # type: ignore[arg-type]
    )


def decided(tick_s: int, outcome: Outcome, count: int = 1) -> RunRecord:
    return RunRecord("job", tick_s, "n", outcome, 0, 0, tick_s * 1000 + 5, count=count)


def slots(svg: str) -> list[str]:
    return re.findall(r"<g>(.*?)</g>", svg)


def test_the_scale_is_logarithmic_and_bounded() -> None:
    assert timeline.scaled_px(0) == timeline.scaled_px(timeline.FLOOR_S) == 1
    assert timeline.scaled_px(timeline.CEILING_S) == timeline.scaled_px(1e9) == timeline.HALF_PX
    # each decade is the same height: 10 ms -> 100 ms as much as 10 s -> 100 s
    assert timeline.scaled_px(0.1) - timeline.scaled_px(0.01) == pytest.approx(
        timeline.scaled_px(100) - timeline.scaled_px(10)
    )


def test_each_record_is_a_slot_oldest_left_with_its_outcome_lag_and_duration() -> None:
    newest_first = [
        decided(T0 + 50, Outcome.SKIPPED_OVERLAP),
        decided(T0 + 40, Outcome.MISSED, count=3),
        ran(T0 + 30, Outcome.ERROR, 0.02, 0.5, error="boom"),
        ran(T0 + 20, Outcome.OK, 2.5, 120),
        ran(T0 + 10, Outcome.OK, 0.01, 0.2),
    ]
    svg = timeline.strip("job", newest_first, slots=8)
    found = slots(svg)
    assert len(found) == 5
    titles = [re.search(r"<title>(.*?)</title>", slot).group(1) for slot in found]  # type: ignore[union-attr]
    assert [t.split(" · ")[0].split()[1] for t in titles] == [
        "22:13:30Z",  # T0 + 10
        "22:13:40Z",
        "22:13:50Z",
        "22:14:00Z",
        "22:14:10Z",
    ]
    assert "ok · started 2.50 s late · ran 120.00 s" in titles[1]
    assert "error · started 20 ms late · ran 500 ms · boom" in titles[2]
    assert "missed · 3 ticks" in titles[3]
    assert 'class="ok"' in found[0]
    assert 'class="bad"' in found[2]
    assert '<circle class="missed"' in found[3]
    assert '<rect class="skipped"' in found[4]
    assert all('class="lag"' in slot for slot in found[:3])
    assert not any('class="lag"' in slot for slot in found[3:])  # nothing ran: no lag
    # a 2-minute run stands taller than a 200 ms one; a 2.5 s lag deeper than a 10 ms one
    heights = [
        float(h)
        for h in re.findall(r'class="ok" x="[^"]+" y="[^"]+" width="\d+" height="([^"]+)"', svg)
    ]
    assert heights[1] > heights[0]
    lags = [
        float(h)
        for h in re.findall(r'class="lag" x="[^"]+" y="[^"]+" width="\d+" height="([^"]+)"', svg)
    ]
    assert lags[1] > lags[0]
    # fewer records than slots: the strip fills from the right, the newest at the end
    first_x = float(re.search(r'class="slot" x="([^"]+)"', svg).group(1))  # type: ignore[union-attr]
    assert first_x == 3 * timeline.SLOT_PX


def test_the_strip_shows_at_most_its_slots_the_newest_ones() -> None:
    records = [ran(T0 + 100 - i, Outcome.OK, 0.01, 0.1) for i in range(50)]  # newest first
    found = slots(timeline.strip("job", records, slots=30))
    assert len(found) == 30
    assert "22:15:00Z" in found[-1]  # T0 + 100, the newest
    assert "22:14:31Z" in found[0]  # T0 + 71, the oldest of the 30 kept
    assert timeline.strip("job", []).count("<g>") == 0


def test_texts_in_the_strip_are_escaped() -> None:
    svg = timeline.strip(HOSTILE, [ran(T0, Outcome.ERROR, 0.1, 1, error=HOSTILE)])
    assert "<img" not in svg
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in svg


def test_the_page_draws_a_strip_per_job_and_still_loads_nothing() -> None:
    def status(name: str) -> JobStatus:
        return JobStatus(
            name, "@every 10s", "UTC", T0 + 10, T0, "ok", None, None, False, 0, 0, "skip", "latest"
        )

    view = FleetView(
        namespace="demo",
        now_s=T0 + 60,
        jobs=(status("a"), status("b")),
        nodes=(NodeInfo("n", (T0 + 65) * 1000, (T0 + 60) * 1000),),
        histories={"a": (ran(T0, Outcome.OK, 0.01, 3),), "b": ()},
    )
    page = render(view, actions_token=None, refresh_s=5)
    assert page.count('<svg class="strip"') == 2
    assert "Run timeline" in page
    assert "no run yet" in page  # b
    assert "3.000s" in page  # the longest run of a
    for external in ("<script", "<link", "src=", "href=", "http://", "https://", "@import"):
        assert external not in page
