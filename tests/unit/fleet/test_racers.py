"""The racers' ranking: the same on every node, stable under churn, even, and cheap."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronrace.errors import ConfigError
from cronrace.fleet import membership, rings
from cronrace.fleet.membership import Membership, late_fire_bound_s
from cronrace.fleet.racers import CHUNK, POINTS_PER_NODE, Racers, Ring, key_point
from cronrace.settings import SidecarSettings, load_settings
from cronrace.web.metrics import PrometheusObserver

JOBS = [f"job-{i}" for i in range(200)]
TICKS = range(1_700_000_000, 1_700_000_050)


def nodes(n: int) -> list[str]:
    return [f"node-{i}" for i in range(n)]


def test_ranking_is_pinned_across_processes_and_versions() -> None:
    # blake2b, never hash(): these values must not change with PYTHONHASHSEED or a
    # release, or nodes of two versions would race for different ticks.
    assert key_point("cleanup", 1_700_000_000) == 0x65CD66C5D69DB3F5
    ring = Ring.build(nodes(6))
    assert ring.candidates("cleanup", 1_700_000_000, 3) == ("node-2", "node-5", "node-4")


def test_every_node_ranks_alike_whatever_order_it_learned_the_members_in() -> None:
    members = nodes(12)
    views = []
    for seed in range(4):
        shuffled = members[:]
        random.Random(seed).shuffle(shuffled)
        views.append(Ring.build(shuffled, cache={} if seed % 2 else None))
    for job in JOBS[:50]:
        for tick in TICKS:
            ranked = {view.candidates(job, tick, 3) for view in views}
            assert len(ranked) == 1


def test_candidates_are_distinct_most_preferred_first_and_all_when_few() -> None:
    ring = Ring.build(nodes(5))
    for job in JOBS[:20]:
        for tick in TICKS:
            two = ring.candidates(job, tick, 2)
            assert len(set(two)) == 2
            assert two[0] == ring.preferred(job, tick)
            assert ring.candidates(job, tick, 9) == ring.candidates(job, tick, 5)
            assert set(ring.candidates(job, tick, 9)) == set(nodes(5))
    assert Ring.build([]).candidates("a", 1, 2) == ()
    assert Ring.build([]).preferred("a", 1) is None


def test_one_node_leaving_moves_only_the_ticks_it_was_a_candidate_for() -> None:
    n, k = 10, 2
    full = Ring.build(nodes(n))
    gone = "node-3"
    less = Ring.build([m for m in nodes(n) if m != gone])
    pairs = [(job, tick) for job in JOBS for tick in TICKS]
    moved = 0
    for job, tick in pairs:
        before, after = full.candidates(job, tick, k), less.candidates(job, tick, k)
        if gone in before:
            moved += 1
            assert [m for m in before if m != gone] == list(after[: k - 1])
        else:
            assert before == after
    # Expected share k/N = 20 %; 10,000 pairs keep the sample error near 0.4 %.
    assert moved / len(pairs) == pytest.approx(k / n, abs=0.04)


def test_one_node_joining_takes_about_its_share_and_changes_nothing_else() -> None:
    n, k = 10, 3
    before = Ring.build(nodes(n))
    after = Ring.build([*nodes(n), "newcomer"])
    pairs = [(job, tick) for job in JOBS for tick in TICKS]
    changed = 0
    for job, tick in pairs:
        old, new = before.candidates(job, tick, k), after.candidates(job, tick, k)
        if old != new:
            changed += 1
            assert "newcomer" in new
            assert [m for m in new if m != "newcomer"] == list(old[: k - 1])
    assert changed / len(pairs) == pytest.approx(k / (n + 1), abs=0.04)


@pytest.mark.parametrize(("n", "k"), [(5, 1), (5, 2), (6, 2), (20, 3)])
def test_candidacy_and_preference_spread_evenly(n: int, k: int) -> None:
    ring = Ring.build(nodes(n))
    chosen: Counter[str] = Counter()
    first: Counter[str] = Counter()
    for job in JOBS:
        for tick in TICKS:
            cands = ring.candidates(job, tick, k)
            chosen.update(cands)
            first[cands[0]] += 1
    # With 160 points per node a node's share has a coefficient of variation of about
    # 1/sqrt(160) = 8 %: the busiest of n is below 1.25 x the mean (the target).
    for counts in (chosen, first):
        assert len(counts) == n
        mean = sum(counts.values()) / n
        assert max(counts.values()) / mean < 1.25
        assert min(counts.values()) / mean > 0.75


def test_candidates_rotate_with_the_tick() -> None:
    ring = Ring.build(nodes(6))
    sets = {ring.candidates("cleanup", tick, 2) for tick in range(1_700_000_000, 1_700_000_200)}
    assert len({m for s in sets for m in s}) == 6
    assert len(sets) > 15  # 30 ordered pairs possible


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=12),
    k=st.integers(min_value=1, max_value=4),
    drop=st.sets(st.integers(min_value=0, max_value=11)),
    tick=st.integers(min_value=0, max_value=2**40),
)
def test_a_candidate_of_a_larger_view_is_a_candidate_of_every_smaller_view_listing_it(
    n: int, k: int, drop: set[int], tick: int
) -> None:
    # What keeps every tick raced while views differ: dead members listed by some views
    # only add candidates elsewhere, never remove a live node's own candidacy.
    members = nodes(n)
    big = Ring.build(members)
    small_members = [m for i, m in enumerate(members) if i not in drop]
    small = Ring.build(small_members)
    for node in big.racers("job", tick, k):
        if node in small.members:
            assert node in small.racers("job", tick, k)
            assert small.races(node, "job", tick, k)


def test_races_in_all_mode_with_few_members_and_for_nodes_the_view_lacks() -> None:
    ring = Ring.build(nodes(4))
    assert ring.races("node-0", "j", 1, None)
    assert ring.races("node-0", "j", 1, 4)
    assert ring.races("unknown", "j", 1, 1)
    racing = [node for node in nodes(4) if ring.races(node, "j", 1, 2)]
    assert racing == sorted(ring.racers("j", 1, 2))


def test_ring_rebuild_reuses_cached_points() -> None:
    cache: dict[str, list[int]] = {}
    Ring.build(nodes(3), cache)
    assert set(cache) == set(nodes(3))
    assert all(len(points) == POINTS_PER_NODE for points in cache.values())
    first = cache["node-0"]
    Ring.build(nodes(4), cache)
    assert cache["node-0"] is first


@pytest.mark.parametrize(
    ("text", "k"), [("all", None), ("ALL", None), (" 2 ", 2), ("1", 1), (3, 3), (Racers(2), 2)]
)
def test_racers_setting_reads_all_or_a_positive_integer(text: object, k: int | None) -> None:
    assert Racers.parse(text).k == k
    assert str(Racers.parse(text)) == ("all" if k is None else str(k))


@pytest.mark.parametrize("text", ["0", "-1", "two", "", 0, -2, True, 1.5, None])
def test_racers_setting_refuses_anything_else_in_one_line(text: object) -> None:
    with pytest.raises(ValueError, match=r"^racers must be 'all' or an integer >= 1, got .+$"):
        Racers.parse(text)


def test_racers_setting_from_the_environment_and_from_a_config_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONRACE_RACERS", "2")
    assert load_settings().racer_count == 2
    monkeypatch.setenv("CRONRACE_RACERS", "all")
    assert load_settings().racer_count is None
    monkeypatch.delenv("CRONRACE_RACERS")
    assert load_settings().racers == "all"
    table = SidecarSettings.from_table({"store_url": "memory://", "racers": 3})
    assert table.racer_count == 3


def test_a_bad_racers_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONRACE_RACERS", "none")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        "agent: racers 'none' (from CRONRACE_RACERS): use 'all' or an integer >= 1"
    )


@pytest.mark.parametrize(("text", "groups"), [("jobs", None), (None, None), (" 8 ", 8), (1, 1)])
def test_racer_groups_setting_reads_jobs_or_a_positive_integer(
    text: object, groups: int | None
) -> None:
    racers = Racers.parse("2", text)
    assert (racers.k, racers.groups) == (2, groups)
    assert str(racers) == ("2" if groups is None else f"2 in {groups} groups")
    placed = racers.placed_as("backup")
    assert placed == "backup" if groups is None else placed.startswith("\x00group\x00")
    if groups == 1:  # one group: every job is placed by it
        assert racers.placed_as("another") == placed


@pytest.mark.parametrize("text", ["0", "-1", "some", 0, True, 2.5])
def test_racer_groups_setting_refuses_anything_else_in_one_line(text: object) -> None:
    with pytest.raises(ValueError, match=r"^racer_groups must be 'jobs' or an integer >= 1, got"):
        Racers.parse("2", text)


def test_racer_groups_need_k_racers_and_say_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="racer_groups needs racers = k"):
        Racers(None, 4)
    table = SidecarSettings.from_table({"store_url": "memory://", "racers": 3, "racer_groups": 4})
    assert table.racer_setting == Racers(3, 4)
    assert load_settings().racer_setting == Racers()
    monkeypatch.setenv("CRONRACE_RACERS", "2")
    monkeypatch.setenv("CRONRACE_RACER_GROUPS", "16")
    assert load_settings().racer_setting == Racers(2, 16)
    monkeypatch.setenv("CRONRACE_RACERS", "all")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        "agent: racer_groups '16' (from CRONRACE_RACER_GROUPS): groups place k racers: set "
        "racers to an integer k too"
    )
    monkeypatch.setenv("CRONRACE_RACER_GROUPS", "many")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        "agent: racer_groups 'many' (from CRONRACE_RACER_GROUPS): use 'jobs' or an integer >= 1"
    )


def test_grouped_jobs_share_their_groups_racers_and_at_most_k_times_groups_nodes_race() -> None:
    ring = Ring.build(f"n{i}" for i in range(60))
    jobs = [f"job-{i}" for i in range(400)]
    grouped = Racers(2, 5)
    assert len({grouped.placed_as(job) for job in jobs}) == 5
    # Every group holds a share of the jobs near 1/5 (a stable hash of each name).
    sizes = Counter(grouped.placed_as(job) for job in jobs)
    assert min(sizes.values()) > 400 / 5 / 2
    for tick_s in (1_700_000_000, 1_700_003_600, 1_700_007_200):
        racing = set()
        for job in jobs:
            racers = ring.racers(grouped.placed_as(job), tick_s, 2)
            racing.update(racers)
        assert len(racing) <= 2 * 5
    alone = {n for job in jobs for n in ring.racers(job, 1_700_000_000, 2)}
    assert len(alone) > 50  # each job alone: nearly every node races something
    # Membership asks by the group: a node races a job iff it is among its group's racers.
    view = Membership("n0", grouped, heartbeat_s=2.0)
    view.ring = ring
    for job in jobs[:50]:
        expected = "n0" in ring.racers(grouped.placed_as(job), 1_700_000_000, 2)
        assert view.races(job, 1_700_000_000) == expected


def test_membership_counts_members_heard_lately_itself_always_and_reports_departures() -> None:
    left: list[tuple[frozenset[str], frozenset[str], int]] = []
    view = Membership("me", Racers(2), heartbeat_s=2.0)
    view.on_change = lambda before, after, last_ms: (
        left.append((before.members, after.members, last_ms))
        if before.members - after.members
        else None
    )
    assert view.races("job", 1)  # before the first read every node races
    ttl_ms = 6000
    now_ms = 100_000
    # Members race together only once they publish what this node runs.
    view.alike(dict.fromkeys(["me", "a", "b", "slow"], "same"), now_ms)
    # Expiry = last heartbeat + ttl. "slow" beat 3.1 s ago: past 1.5 heartbeats (3 s).
    beats = {"a": now_ms - 500, "b": now_ms - 2900, "slow": now_ms - 3100}
    view.update({n: b + ttl_ms for n, b in beats.items()}, now_ms=now_ms, ttl_ms=ttl_ms)
    assert view.ring.members == {"me", "a", "b"}
    assert left == []  # nobody had been counted yet
    view.update({"a": now_ms + 1000 + ttl_ms}, now_ms=now_ms + 1000, ttl_ms=ttl_ms)
    assert view.ring.members == {"me", "a"}
    assert left == [({"me", "a", "b"}, {"me", "a"}, now_ms - 2900)]
    racing = sum(view.races("job", t) for t in range(1000))
    assert racing == 1000  # two members, two racers: this node races for every tick
    assert late_fire_bound_s(2.0) == 5.0


@settings(max_examples=40, deadline=None)
@given(
    before=st.sets(st.integers(min_value=0, max_value=40), min_size=1),
    after=st.sets(st.integers(min_value=0, max_value=40), min_size=1),
)
def test_a_ring_derived_from_the_last_one_is_the_ring_built_from_scratch(
    before: set[int], after: set[int]
) -> None:
    # Nodes must agree whether they built their ring at start-up or spliced it at every
    # membership change since.
    cache: dict[str, list[int]] = {}
    old = Ring.build((f"n{i}" for i in before), cache)
    derived = old.with_members((f"n{i}" for i in after), cache)
    fresh = Ring.build(f"n{i}" for i in after)
    assert derived.members == fresh.members
    assert [derived.candidates("job", t, 3) for t in range(50)] == [
        fresh.candidates("job", t, 3) for t in range(50)
    ]
    assert derived == fresh


def test_one_join_and_one_leave_are_spliced_into_the_same_ring_build_makes() -> None:
    cache: dict[str, list[int]] = {}
    ring = Ring.build(nodes(30), cache)
    left = ring.with_members(nodes(30)[1:], cache)
    assert left == Ring.build(nodes(30)[1:])
    joined = left.with_members([*nodes(30)[1:], "newcomer", "other"], cache)
    assert joined == Ring.build([*nodes(30)[1:], "newcomer", "other"])


def test_metrics_count_the_claims_a_node_skipped_and_the_members_it_sees() -> None:
    observer = PrometheusObserver()
    observer.claims_skipped(4)
    observer.claims_skipped(2)
    observer.membership(6)
    sample = observer.registry.get_sample_value
    assert sample("cronrace_claims_skipped_total") == 6
    assert sample("cronrace_members") == 6


def test_members_that_run_other_jobs_or_have_not_said_are_left_out_of_the_race() -> None:
    view = Membership("me", Racers(1), heartbeat_s=2.0)
    now_ms, ttl_ms = 100_000, 6000
    expiries = dict.fromkeys(["me", "a", "b", "new"], now_ms + ttl_ms)
    view.update(expiries, now_ms=now_ms, ttl_ms=ttl_ms)
    assert view.ring.members == {"me"}  # nothing known yet: it races for every tick
    assert all(view.races("job", t) for t in range(100))
    view.alike({"me": "x", "a": "x", "b": "other jobs"}, now_ms)
    assert view.ring.members == {"me", "a"}
    assert view.live == {"me", "a", "b", "new"}
    assert not view.uniform
    # Racers are placed per job and window (racers.py): count over jobs, not ticks.
    racing = sum(view.races(f"job-{i}", 1) for i in range(1000))
    assert 400 < racing < 600  # one racer of the two alike
    view.alike({"me": "x", "a": "x", "b": "x", "new": "x"}, now_ms)
    assert view.uniform
    assert view.ring.members == {"me", "a", "b", "new"}


def test_a_fleet_starting_logs_no_warning_per_join_but_one_for_a_member_unlike(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 200 nodes joining one by one: each is seen before it has said what it runs, then
    # alike at the next exchange. That is DEBUG: at 1,000 nodes a WARNING and an INFO line
    # per join on every node buried the one line that matters (issue 19).
    caplog.set_level(logging.DEBUG, logger="cronrace.fleet.membership")
    view = Membership("me", Racers(2), heartbeat_s=2.0)
    now_ms, ttl_ms = 100_000, 6000
    said = {"me": "x"}
    expiries = {"me": now_ms + ttl_ms}
    for i in range(200):
        now_ms += 300
        expiries = dict.fromkeys([*expiries, f"n{i}"], now_ms + ttl_ms)  # all beat
        view.update(expiries, now_ms=now_ms, ttl_ms=ttl_ms)
        said[f"n{i}"] = "x"
        view.alike(said, now_ms)
    assert view.uniform
    # A few joins at a time wait to be placed (JOINS_WAIT_PERIODS): a beat after the wait
    # places those still waiting.
    now_ms += membership.JOINS_WAIT_PERIODS * 2000
    view.update(dict.fromkeys(expiries, now_ms + ttl_ms), now_ms=now_ms, ttl_ms=ttl_ms)
    assert len(view.ring.members) == 201

    def said_at(level: int) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == level and "live node" in r.getMessage()
        ]

    assert said_at(logging.WARNING) == []
    assert said_at(logging.INFO) == ["every live node runs the same jobs: racing among all of them"]
    assert len(said_at(logging.DEBUG)) == 2 * 200 - 1  # pending, then alike, per join
    caplog.clear()
    view.alike({**said, "n7": "other jobs"}, now_ms)
    view.alike({**said, "n7": "other jobs", "n8": "other jobs"}, now_ms)  # said once
    assert said_at(logging.WARNING) == [
        "some live nodes run other jobs, handlers or racers settings: racing among the others"
    ]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert (warning.unlike, warning.unlike_count) == (["n7"], 1)
    view.alike(said, now_ms)
    assert said_at(logging.INFO) == ["every live node runs the same jobs: racing among all of them"]


def answers_as_built(ring: Ring, members: Iterable[str], node: str, ticks: range) -> None:
    """``ring`` is the ring build makes of ``members``: equal, and answering alike."""
    fresh = Ring.build(members)
    assert ring == fresh
    for t in ticks:
        assert ring.candidates("job", t, 3) == fresh.candidates("job", t, 3)
        assert ring.preferred("job", t) == fresh.preferred("job", t)
    assert ring.arcs(node, 2) == fresh.arcs(node, 2)


def test_agents_of_one_process_share_the_ring_of_the_same_members() -> None:
    # Rings are pure values: two views of the same members hold one ring, and a view
    # spliced from another agent's recent ring is the ring build makes.
    now_ms, ttl_ms = 100_000, 6000
    views = [Membership(node, Racers(2), heartbeat_s=2.0) for node in ("a", "b")]
    members = ["a", "b", *nodes(40)]
    for view in views:
        view.update(dict.fromkeys(members, now_ms + ttl_ms), now_ms=now_ms, ttl_ms=ttl_ms)
        view.alike(dict.fromkeys(members, "x"), now_ms)
    assert views[0].ring is views[1].ring
    assert views[0].ring == Ring.build(members)
    more = [*members[:-3], "c", "d"]
    views[0].hold()  # a beat: its read and its exchange change the ring once
    views[0].update(dict.fromkeys(more, now_ms + ttl_ms), now_ms=now_ms, ttl_ms=ttl_ms)
    views[0].alike(dict.fromkeys(more, "x"), now_ms)
    views[0].settle()
    assert views[0].ring == Ring.build(more)


def test_arcs_found_once_are_the_arcs_found_again() -> None:
    ring = Ring.build(nodes(50))
    first = ring.arcs("node-7", 2)
    assert first is not None
    first.clear()  # a caller's copy: the ring's own stays whole
    assert ring.arcs("node-7", 2) == Ring.build(nodes(50)).arcs("node-7", 2)
    assert Ring.build(nodes(2)).arcs("node-0", 2) is None


def test_a_ring_spliced_through_many_changes_is_the_ring_build_makes() -> None:
    # Chunks split as joins pile into them and empty as nodes leave: after every change
    # the spliced ring orders every point as a fresh build does, and answers alike.
    rng = random.Random(7)
    cache: dict[str, list[int]] = {}
    members = set(nodes(60))
    ring = Ring.build(members, cache)
    for step in range(40):
        leaving = set(rng.sample(sorted(members), rng.randint(0, 6)))
        joining = {f"new-{step}-{i}" for i in range(rng.randint(0, 8))}
        members = (members - leaving) | joining
        ring = ring.with_members(members, cache)
        answers_as_built(ring, members, sorted(members)[step % len(members)], range(0, 400, 7))


def test_views_of_one_process_read_one_pool_that_grows_under_them_and_answer_as_build_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A process's agents see different members at each beat: each view reads the pool of
    # every node seen lately, and a node is spliced in once. Views made earlier must keep
    # answering for their own members while the pool grows and its chunks split under
    # them; a pool holding too many nodes gone is replaced.
    monkeypatch.setattr(rings, "_POOL", [])
    monkeypatch.setattr(rings, "_RINGS", {})
    rng = random.Random(11)
    members = set(nodes(40))
    views: list[tuple[frozenset[str], Ring]] = []
    pools = set()
    for step in range(60):
        leaving = set(rng.sample(sorted(members), rng.randint(0, 7)))
        joining = {f"new-{step}-{i}" for i in range(rng.randint(0, 9))}
        members = (members - leaving) | joining
        view = rings.ring_of(frozenset(members), Ring.build([]))
        pools.add(id(rings._POOL[0]))
        views.append((frozenset(members), view))
        for old_members, old_view in views[-6:]:  # older views, the pool grown since
            node = sorted(old_members)[step % len(old_members)]
            answers_as_built(old_view, old_members, node, range(0, 300, 11))
    assert rings.ring_of(frozenset(members), Ring.build([])) is views[-1][1]
    # A node before its first exchange races among itself alone: its ring is its own, and
    # the pool the other views read stays. So does it for a loaded agent's view that
    # counts a third of the members silent.
    pool = rings._POOL[0]
    assert rings.ring_of(frozenset({"lone"}), Ring.build([])) == Ring.build(["lone"])
    assert rings._POOL[0] is pool
    fewer = frozenset(sorted(members)[: len(members) * 2 // 3])
    assert rings.ring_of(fewer, views[-1][1]) == Ring.build(fewer)
    assert rings._POOL[0] is pool
    # A ring derived from one that reads the pool shares none of its chunks: the pool
    # growing afterwards changes nothing of it.
    derived = views[-1][1].with_members([*sorted(members)[1:], "elsewhere"])
    assert derived == Ring.build([*sorted(members)[1:], "elsewhere"])
    assert pool.add([f"later-{i}" for i in range(30)], None)
    assert derived == Ring.build([*sorted(members)[1:], "elsewhere"])
    assert derived.preferred("job", 5) == Ring.build([*sorted(members)[1:], "elsewhere"]).preferred(
        "job", 5
    )
    assert 1 < len(pools) < 30  # replaced now and then as nodes leave, not at every change
    assert len(rings._POOL[0].chunks) > len(nodes(40)) * POINTS_PER_NODE // CHUNK  # split


def test_members_gone_silent_and_back_are_skipped_not_spliced_and_answer_as_build_does() -> None:
    # A loaded fleet's views lose and regain whole processes' agents at every beat (issue
    # 19): a member gone leaves the chunks as they were (walks skip its points), one back
    # costs nothing, and every answer is the one a ring built from the members gives.
    rng = random.Random(11)
    cache: dict[str, list[int]] = {}
    everyone = nodes(80)
    ring = Ring.build(everyone, cache)
    for step in range(40):
        members = set(everyone) - set(rng.sample(everyone, rng.randint(1, 20)))
        joining = step % 3 == 2  # a join meanwhile: spliced in, the gone still skipped
        if joining:
            everyone.append(f"new-{step}")
            members.add(everyone[-1])
        derived = ring.with_members(members, cache)
        assert joining or derived._chunks is ring._chunks  # shared, not copied
        fresh = Ring.build(members)
        assert derived == fresh
        for t in range(0, 300, 7):
            assert derived.candidates("job", t, 3) == fresh.candidates("job", t, 3)
            assert derived.preferred("job", t) == fresh.preferred("job", t)
            assert derived.first_racer("job", t, 2) == fresh.first_racer("job", t, 2)
        node = sorted(members)[step % len(members)]
        assert derived.arcs(node, 2, cache) == fresh.arcs(node, 2)
        ring = derived
    # More than a quarter gone, or a node never held: spliced, and still the same ring.
    few = set(everyone[:50])
    assert ring.with_members(few, cache) == Ring.build(few)
    assert ring.with_members([*few, "newcomer"], cache) == Ring.build([*few, "newcomer"])


def test_a_held_view_changes_its_ring_once_per_beat_and_keeps_when_the_departed_beat() -> None:
    """Issue 19: a beat that reads joins learns the joiners' fingerprints from the exchange
    a moment later. Rebuilt at each, the ring changed twice a beat (first without the
    joiners, then with them): two splices, two passes over this node's arcs. Held, it
    changes once, to the same ring, with the same departure time (takeovers count from
    it) as the two changes unheld."""
    now_ms, ttl_ms = 100_000, 6000
    said = {"me": "x", "a": "x", "b": "x"}

    def view_of() -> tuple[Membership, list[tuple[frozenset[str], frozenset[str], int]]]:
        view = Membership("me", Racers(2), heartbeat_s=2.0)
        view.update(dict.fromkeys(said, now_ms + ttl_ms), now_ms=now_ms, ttl_ms=ttl_ms)
        view.alike(said, now_ms)
        changes: list[tuple[frozenset[str], frozenset[str], int]] = []
        view.on_change = lambda old, new, last_ms: changes.append(
            (old.members, new.members, last_ms)
        )
        return view, changes

    def beat(view: Membership, later_ms: int) -> None:
        # b left, c and d joined; their fingerprints come with the exchange, after the read
        assert view.apply_changes(
            joined=dict.fromkeys(["c", "d"], later_ms + ttl_ms),
            left=["b"],
            silent={},
            live_count=4,
            now_ms=later_ms,
            ttl_ms=ttl_ms,
        )
        view.alike({**said, "c": "x", "d": "x"}, later_ms)

    unheld, twice = view_of()
    beat(unheld, now_ms + 2000)
    assert [new for _old, new, _ms in twice] == [{"me", "a"}, {"me", "a", "c", "d"}]
    held, once = view_of()
    held.hold()
    beat(held, now_ms + 2000)
    assert held.ring.members == {"me", "a", "b"}  # not yet
    assert once == []
    held.settle()
    assert once == [(frozenset({"me", "a", "b"}), frozenset({"me", "a", "c", "d"}), twice[0][2])]
    assert held.ring == unheld.ring
    held.settle()  # nothing held: nothing more
    assert len(once) == 1


def test_a_few_joins_wait_to_be_placed_until_a_while_after_the_last_change() -> None:
    """Issue 19: a forming 1,000-node fleet changed every node's ring at every beat, each
    change a pass over its own arcs and its jobs re-homed. A change that only adds a few
    members now waits until JOINS_WAIT_PERIODS after the last one (a member not yet
    placed only adds racers: its own view places it); departures never wait, and many
    joins at once do not either."""
    hb_ms, ttl_ms, t0 = 2000, 6000, 100_000
    first = [f"n{i}" for i in range(12)]
    view = Membership("n0", Racers(2), heartbeat_s=hb_ms / 1000)
    said = dict.fromkeys([*first, "j1", "j2", *(f"many{i}" for i in range(5))], "x")

    def beat(now_ms: int, members: list[str]) -> None:
        view.hold()
        view.update(dict.fromkeys(members, now_ms + ttl_ms), now_ms=now_ms, ttl_ms=ttl_ms)
        view.alike(said, now_ms)
        view.settle()

    beat(t0, first)
    assert view.ring.members == set(first)  # the first view: placed at once
    wait_ms = membership.JOINS_WAIT_PERIODS * hb_ms
    for at_ms in range(t0 + hb_ms, t0 + wait_ms, hb_ms):
        beat(at_ms, [*first, "j1"])
        assert view.ring.members == set(first)  # one join after a change: waits
        assert view.joins_waiting
    beat(t0 + wait_ms, [*first, "j1"])  # a beat after the wait, nothing new read: placed
    assert view.ring.members == {*first, "j1"}
    assert not view.joins_waiting
    beat(t0 + wait_ms + hb_ms, [*first[:-1], "j1", "j2"])  # a departure: at once, with j2
    assert view.ring.members == {*first[:-1], "j1", "j2"}
    many = [f"many{i}" for i in range(5)]  # over a quarter of the members: at once
    beat(t0 + wait_ms + 2 * hb_ms, [*first[:-1], "j1", "j2", *many])
    assert view.ring.members == {*first[:-1], "j1", "j2", *many}
