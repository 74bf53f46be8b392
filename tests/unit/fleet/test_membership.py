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


def _view_of(nodes: list[str]) -> Membership:
    view = Membership(nodes[0], Racers.parse("2"), 0.5)
    view.update({n: T0_MS + TTL_MS for n in nodes}, now_ms=T0_MS, ttl_ms=TTL_MS)
    view.alike(dict.fromkeys(nodes, "same"), T0_MS)
    return view


def _check_against_ring(view: Membership, jobs: list[str], ticks: list[int]) -> int:
    """Ask the view about every (job, tick) twice over; its answers must be its ring's."""
    ring, raced = view.ring, 0
    for tick in ticks + ticks:
        for job in jobs:
            racers = ring.racers(job, tick, 2)
            expected = None if view.node_id in racers else racers
            assert view.racers_of(job, tick) == expected, (job, tick)
            first = ring.first_racer(job, tick, 2) == view.node_id
            assert view.preferred(job, tick) == first, (job, tick)
            raced += expected is None
    # Kept are only the placements of what this node races (the others are asked about
    # once a window): a node of 10,000 jobs keeps about k·J/N of them, not J.
    assert all(view.node_id in chosen for chosen in view._placed.values())
    return raced


def test_racers_placed_once_per_window_answer_as_the_ring_does_across_windows_and_changes() -> None:
    """A view keeps each job's racers for its placement window (three questions a tick,
    3,600 ticks a window): its answers must stay the ring's own, tick by tick, over
    window boundaries (each job's at its own offset) and after a member leaves."""
    from cronrace.fleet.racers import PLACEMENT_WINDOW_S

    nodes = [f"n{i}" for i in range(6)]
    view = _view_of(nodes)
    jobs = [f"job-{i}" for i in range(40)]
    ticks = [T0_MS // 1000 + s for s in range(0, 2 * PLACEMENT_WINDOW_S, 97)]
    assert _check_against_ring(view, jobs, ticks) > 0
    before = view.ring
    now_ms = T0_MS + 10_000
    view.update({n: now_ms + TTL_MS for n in nodes if n != "n3"}, now_ms=now_ms, ttl_ms=TTL_MS)
    view.alike({n: "same" for n in nodes if n != "n3"}, now_ms)
    assert view.ring is not before
    assert "n3" not in view.ring.members
    assert _check_against_ring(view, jobs, ticks) > 0  # the same windows, placed again


def test_placements_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``PLACED_MAX`` placements the view drops them all and places again as asked."""
    import cronrace.fleet.membership as membership_module

    monkeypatch.setattr(membership_module, "PLACED_MAX", 8)
    view = _view_of([f"n{i}" for i in range(6)])
    jobs = [f"job-{i}" for i in range(12)]
    _check_against_ring(view, jobs, [T0_MS // 1000 + s for s in range(0, 7200, 300)])
    assert 0 < len(view._placed) <= 8
