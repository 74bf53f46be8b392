"""A job's last runs as an SVG strip: late, long or failing at a glance, with no script.

One slot per run record, oldest on the left and the newest on the right. Above the
middle line a bar as tall as the run lasted, below it one as deep as its start was late,
both on one log scale of seconds (:data:`FLOOR_S` to :data:`CEILING_S`), so a 20 ms lag
and a 2-minute run can be told apart in one strip. The bar's colour is the outcome's
(the page's own: green ok; red error, lease lost, cancelled, abandoned). Ticks that did
not run are marks at the line: a red ring for missed ticks, a grey square for skipped ones
(overlap, paused, not replicated), a grey dot for the rest (queued, stale). Every slot
has a ``<title>``, which browsers show as a tooltip: the tick, the outcome, the lag and
the duration in numbers.

Pure: records in, markup out. Every text is escaped; the markup is inline SVG, which the
page's ``Content-Security-Policy`` (``default-src 'none'``) allows, since nothing is fetched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord, utc_from_s

#: Runs per strip (the records read per job for it).
SLOTS = 30
SLOT_PX = 12
BAR_PX = 8
#: Pixels above the line (duration) and below it (lag).
HALF_PX = 20
#: The log scale of both bars: at most this short shows as the thinnest bar, at least
#: this long as the whole half.
FLOOR_S = 0.01
CEILING_S = 1000.0

BAD = frozenset({Outcome.ERROR, Outcome.LEASE_LOST, Outcome.CANCELLED, Outcome.ABANDONED})
SKIPPED = frozenset({Outcome.SKIPPED_OVERLAP, Outcome.SKIPPED_PAUSED, Outcome.NOT_REPLICATED})

#: Styles the strips use, added to the page's stylesheet.
STYLE = """
svg.strip{display:block}svg.strip .line{stroke:#b0bec5;stroke-width:1}
svg.strip .ok{fill:#43a047}svg.strip .bad{fill:#e53935}svg.strip .other{fill:#90a4ae}
svg.strip .lag{fill:#fb8c00}svg.strip .missed{fill:none;stroke:#e53935;stroke-width:1.5}
svg.strip .skipped{fill:#b0bec5}svg.strip .slot{fill:transparent}
.legend{color:#5a6169;font-size:.9em}.legend i{display:inline-block;width:.8em;height:.8em;
margin:0 .25em 0 .7em;vertical-align:-.05em}
"""

LEGEND = (
    '<p class="legend">Oldest left, newest right. Above the line how long a run lasted,'
    " below it how late it started, on one log scale from 10 ms to 1000 s:"
    '<i style="background:#43a047"></i>ok<i style="background:#e53935"></i>failed'
    '<i style="background:#fb8c00"></i>start lag'
    '<i style="border:1.5px solid #e53935;border-radius:50%;box-sizing:border-box"></i>missed'
    '<i style="background:#b0bec5"></i>skipped. Hover over a run for its numbers.</p>'
)


def scaled_px(seconds: float) -> float:
    """The bar height of ``seconds``: 1 px at :data:`FLOOR_S`, the half at :data:`CEILING_S`."""
    if seconds <= FLOOR_S:
        return 1.0
    share = math.log10(min(seconds, CEILING_S) / FLOOR_S) / math.log10(CEILING_S / FLOOR_S)
    return 1.0 + share * (HALF_PX - 1)


def lag_s(record: RunRecord) -> float | None:
    """How late the run's handler started after its tick, or None when nothing ran."""
    if not record.started_ms:
        return None
    return max(0.0, record.started_ms / 1000 - record.tick_s)


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _title(record: RunRecord) -> str:
    parts = [f"{utc_from_s(record.tick_s):%Y-%m-%d %H:%M:%S}Z", record.outcome.value]
    if record.count > 1:
        parts.append(f"{record.count} ticks")
    if (lag := lag_s(record)) is not None:
        parts.append(f"started {_seconds(lag)} late")
    if (duration := record.duration_s) is not None:
        parts.append(f"ran {_seconds(duration)}")
    if record.trigger_id:
        parts.append("triggered by hand")
    if record.error:
        parts.append(record.error[:200])
    return escape(" · ".join(parts))


def _slot(record: RunRecord, x: float) -> str:
    """The marks of one run record, centred at ``x``."""
    mid, left = HALF_PX + 1, x - BAR_PX / 2
    shapes = [
        f'<rect class="slot" x="{x - SLOT_PX / 2:g}" y="0" width="{SLOT_PX}" height="{2 * mid}"/>'
    ]
    duration, lag = record.duration_s, lag_s(record)
    if duration is not None:
        css = "ok" if record.outcome is Outcome.OK else "bad" if record.outcome in BAD else "other"
        height = scaled_px(duration)
        shapes.append(
            f'<rect class="{css}" x="{left:g}" y="{mid - height:.1f}" '
            f'width="{BAR_PX}" height="{height:.1f}"/>'
        )
    if lag is not None:
        shapes.append(
            f'<rect class="lag" x="{left:g}" y="{mid + 1}" width="{BAR_PX}" '
            f'height="{scaled_px(lag):.1f}"/>'
        )
    if duration is None:  # nothing ran: a mark at the line says why
        if record.outcome is Outcome.MISSED:
            shapes.append(f'<circle class="missed" cx="{x:g}" cy="{mid}" r="3.5"/>')
        elif record.outcome in SKIPPED:
            shapes.append(
                f'<rect class="skipped" x="{x - 3:g}" y="{mid - 3}" width="6" height="6"/>'
            )
        elif record.outcome in BAD:  # abandoned, or cancelled before it started
            shapes.append(
                f'<rect class="bad" x="{left:g}" y="{mid - 2}" width="{BAR_PX}" height="4"/>'
            )
        else:
            shapes.append(f'<circle class="skipped" cx="{x:g}" cy="{mid}" r="2"/>')
    return f"<g><title>{_title(record)}</title>{''.join(shapes)}</g>"


def strip(job: str, records: Sequence[RunRecord], slots: int = SLOTS) -> str:
    """The SVG strip of a job's newest ``slots`` records (given newest first, as read)."""
    shown = list(reversed(records[:slots]))  # oldest first, on the left
    width, height = slots * SLOT_PX, 2 * (HALF_PX + 1)
    first = slots - len(shown)  # fewer runs than slots: the strip fills from the right
    marks = "".join(_slot(record, (first + i + 0.5) * SLOT_PX) for i, record in enumerate(shown))
    bad = sum(1 for r in shown if r.outcome in BAD or r.outcome is Outcome.MISSED)
    label = f"{job}: the last {len(shown)} run record(s), {bad} failed or missed"
    return (
        f'<svg class="strip" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" aria-label="{escape(label)}">'
        f'<line class="line" x1="0" y1="{HALF_PX + 1}" x2="{width}" y2="{HALF_PX + 1}"/>'
        f"{marks}</svg>"
    )
