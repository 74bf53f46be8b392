"""Placement windows and the key index: a node finds exactly the jobs it races."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from cronrace.fleet.placement import KeyIndex
from cronrace.fleet.racers import (
    PLACEMENT_WINDOW_S,
    Racers,
    Ring,
    key_point,
    placement_start_s,
    window_offset_s,
)

JOBS = [f"job-{i}" for i in range(300)]
NOW_S = 1_700_000_000


def indexed(jobs: list[str], now_s: int = NOW_S, racers: Racers | None = None) -> KeyIndex:
    """Each job indexed at its window, placed alone (or by its group: ``racers``)."""
    placed_as = None if racers is None else racers.placed_as
    index = KeyIndex(placed_as)
    for job in jobs:
        index.put(job, placement_start_s(job if racers is None else racers.placed_as(job), now_s))
    return index


def test_every_tick_of_a_window_has_the_same_racers_and_windows_turn_one_job_at_a_time() -> None:
    ring = Ring.build(f"n{i}" for i in range(20))
    start = placement_start_s("cleanup", NOW_S)
    assert start <= NOW_S < start + PLACEMENT_WINDOW_S
    window = range(start, start + PLACEMENT_WINDOW_S)
    assert len({ring.racers("cleanup", t, 2) for t in window}) == 1
    # The jobs' windows start at different seconds of the period: turns are spread.
    offsets = Counter(window_offset_s(job) for job in JOBS)
    assert max(offsets.values()) <= 4
    assert placement_start_s("cleanup", start + PLACEMENT_WINDOW_S) == start + PLACEMENT_WINDOW_S


def test_the_racers_take_turns_being_first_within_a_window() -> None:
    ring = Ring.build(f"n{i}" for i in range(10))
    start = placement_start_s("cleanup", NOW_S)
    firsts = Counter(ring.first_racer("cleanup", t, 2) for t in range(start, start + 600))
    assert set(firsts) == set(ring.racers("cleanup", start, 2))
    assert min(firsts.values()) > 240
    minutely = Counter(ring.first_racer("cleanup", t, 3) for t in range(start, start + 600, 60))
    assert len(minutely) >= 2  # not always the same racer for a job whose ticks are all even


@settings(max_examples=80, deadline=None)
@given(
    members=st.sets(st.integers(min_value=0, max_value=30), min_size=1),
    gone=st.sets(st.integers(min_value=0, max_value=30)),
    k=st.integers(min_value=1, max_value=3),
    groups=st.sampled_from([None, 1, 3, 40]),
)
def test_a_node_finds_exactly_the_jobs_it_races(
    members: set[int], gone: set[int], k: int, groups: int | None
) -> None:
    nodes = [f"n{i}" for i in sorted(members)]
    ring = Ring.build(nodes)
    absent = {f"n{i}" for i in gone} & set(nodes[1:])
    if absent:  # members gone silent stay in the ring's chunks, skipped (racers.py)
        ring = ring.with_members(frozenset(nodes) - absent)
    racers = Racers(k, groups)
    index = indexed(JOBS, racers=racers)
    me = nodes[0]
    raced = index.raced_by(ring, me, k)
    placed = {job: racers.placed_as(job) for job in JOBS}
    expected = {job for job in JOBS if me in ring.racers(placed[job], NOW_S, k)}
    # A window's turn asks the node's own arcs with the job's new key (a binary search).
    decided = {
        job
        for job in JOBS
        if ring.decides(me, k, key_point(placed[job], placement_start_s(placed[job], NOW_S)))
    }
    assert decided == expected
    if raced is None:  # at most k others: it races every job
        assert expected == set(JOBS)
        return
    assert raced == expected


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(min_value=2, max_value=12),
    k=st.integers(min_value=1, max_value=3),
    keys=st.lists(st.integers(min_value=0, max_value=(1 << 64) - 1), max_size=40),
)
def test_a_nodes_own_arcs_decide_any_key_as_the_walk_does(
    nodes: int, k: int, keys: list[int]
) -> None:
    ring = Ring.build(f"n{i}" for i in range(nodes))
    points = sorted(p for chunk, _owners in ring._chunks for p in chunk)
    # The ring's own points and their neighbours are where an off-by-one would show.
    probes = [*keys, 0, (1 << 64) - 1, *points[:20], *(p + 1 for p in points[:20])]
    probes += [p - 1 for p in points[:20]]
    for key in probes:
        key %= 1 << 64
        walked = ring.candidates_at(key, k)
        for node in ("n0", f"n{nodes - 1}"):
            assert ring.decides(node, k, key) == (node in walked), (node, key)


def test_a_node_looks_at_about_k_over_n_of_the_jobs_however_many_joined() -> None:
    members = [f"n{i}" for i in range(50)]
    index = indexed(JOBS)
    for ring in (Ring.build(members), Ring.build([*members, *(f"new{i}" for i in range(200))])):
        raced = index.raced_by(ring, "n0", 2)
        assert raced is not None
        assert raced == {j for j in JOBS if "n0" in ring.racers(j, NOW_S, 2)}
        assert len(raced) < 4 * 2 * len(JOBS) / len(ring.members)


def test_the_index_follows_each_jobs_window_and_forgets_dropped_jobs() -> None:
    index = indexed(JOBS[:3])
    index.put("job-0", placement_start_s("job-0", NOW_S) + PLACEMENT_WINDOW_S)
    index.drop("job-1")
    index.drop("never-there")
    assert sorted(index.names()) == ["job-0", "job-2"]
    assert len(index) == 2
    assert "job-1" not in index
    assert index.raced_by(Ring.build(["a", "b", "c"]), "a", 3) is None  # races every job
    assert index.raced_by(Ring.build(["a"]), "a", 1) is None


def test_an_index_grown_one_job_at_a_time_holds_what_one_placed_at_once_does() -> None:
    one_by_one, at_once = KeyIndex(), KeyIndex()
    for job in JOBS:  # jobs added at runtime: the buckets are sized again as it grows
        one_by_one.put(job, placement_start_s(job, NOW_S))
    at_once.put_all((job, placement_start_s(job, NOW_S)) for job in JOBS)
    keys = [key_point(job, placement_start_s(job, NOW_S)) for job in one_by_one.names()]
    assert keys == sorted(keys)
    assert one_by_one.names() == at_once.names()
    ring = Ring.build(f"n{i}" for i in range(7))
    for node in ("n0", "n3"):
        raced = {j for j in JOBS if node in ring.racers(j, NOW_S, 2)}
        assert one_by_one.raced_by(ring, node, 2) == at_once.raced_by(ring, node, 2) == raced
    assert one_by_one.within([(5, 5)]) == set(JOBS)  # an arc of the whole ring wraps


def test_a_grouped_index_finds_each_job_among_those_sharing_its_key() -> None:
    # Grouped, a group's jobs share one key; a window's turn puts them one by one, and a
    # job removed at runtime is dropped from among them by name.
    racers = Racers(2, 3)
    index = indexed(JOBS, racers=racers)
    moved = JOBS[::7]
    for job in moved:  # their window turned: the group's key in the next window
        index.put(job, placement_start_s(racers.placed_as(job), NOW_S) + PLACEMENT_WINDOW_S)
    for job in JOBS[1::7]:
        index.drop(job)
    kept = [j for j in JOBS if j not in JOBS[1::7]]
    assert sorted(index.names()) == sorted(kept)
    fresh = KeyIndex(racers.placed_as)
    fresh.put_all(
        (
            job,
            placement_start_s(racers.placed_as(job), NOW_S)
            + (PLACEMENT_WINDOW_S if job in moved else 0),
        )
        for job in kept
    )
    assert index.names() == fresh.names()  # the same order: by key, then by name
    ring = Ring.build(f"n{i}" for i in range(9))
    for node in ("n0", "n4"):
        assert index.raced_by(ring, node, 2) == fresh.raced_by(ring, node, 2)
