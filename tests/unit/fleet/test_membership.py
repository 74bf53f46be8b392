"""A view that was cut off (its own heartbeats failing) and sees members gone late."""

from __future__ import annotations

import pytest

from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import Racers

TTL_MS = 1500  # three periods of a 0.5 s heartbeat
T0_MS = 1_800_000_000_000


@pytest.mark.parametrize("pruned", [True, False], ids=["pruned", "still-listed"])
def test_members_gone_while_this_node_was_cut_off_are_dated_by_their_last_beat(
    pruned: bool,
) -> None:
    """d0's beats failed for 80 s; d1 and d2 stopped beating at its start. The first read
    after is blind (d0's own silence: theirs is no evidence) and keeps them; a later one
    finds them gone. The change must date them by their last beat, 80 s back, so that the
    ticks left to them since are looked for (tick/share.py, recover): dated now, when the
    blind read had dropped their beats and a beat of d0's had since pruned their entries,
    none was (the real-process test_late_departures, 1 run in 4: 79 ticks unrecorded)."""
    view = Membership("d0", Racers.parse("2"), 0.5)
    changes: list[tuple[list[str], int]] = []
    view.on_change = lambda before, after, last_ms: changes.append(
        (sorted(before.members - after.members), last_ms)
    )
    view.update({n: T0_MS + TTL_MS for n in ("d0", "d1", "d2")}, now_ms=T0_MS, ttl_ms=TTL_MS)
    view.alike({"d0": "same", "d1": "same", "d2": "same"}, T0_MS)
    assert view.ring.members == {"d0", "d1", "d2"}
    now_ms = T0_MS + 80_000
    silent = {"d1": T0_MS + TTL_MS, "d2": T0_MS + TTL_MS}
    assert view.apply_changes(
        joined={}, left=[], silent=silent, live_count=1, now_ms=now_ms, ttl_ms=TTL_MS
    )
    assert view.ring.members == {"d0", "d1", "d2"}  # blind: kept
    for _ in range(4):
        now_ms += 500
        listed = {} if pruned else silent
        if not view.apply_changes(
            joined={}, left=[], silent=listed, live_count=1, now_ms=now_ms, ttl_ms=TTL_MS
        ):
            view.update({"d0": now_ms + TTL_MS}, now_ms=now_ms, ttl_ms=TTL_MS)
    assert view.ring.members == {"d0"}
    left, last_ms = changes[-1]
    assert left == ["d1", "d2"]
    assert last_ms == T0_MS
