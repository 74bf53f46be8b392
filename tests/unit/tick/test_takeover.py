"""The agent's side of the takeover (tick/takeover.py): lost claims remembered, taken over
when their winner departs, on the embedded store."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pytest

from cronrace.errors import RedisUnavailableError
from cronrace.stores.redis import Store
from cronrace.stores.values import Claim, Owner
from cronrace.tick.takeover import RETRY_AFTER_S, Takeovers

A, B = Owner("a", "1"), Owner("b", "2")
NOW = 1_000.0


class DownStore(Store):
    """A store whose takeovers fail while ``down``."""

    down = False

    async def take_over(
        self, claims: Sequence[Claim], departed: Collection[str], owner: Owner
    ) -> list[Owner | None]:
        if self.down:
            raise RedisUnavailableError("Connection refused")
        return await super().take_over(claims, departed, owner)


@pytest.fixture
def store(namespace: str) -> DownStore:
    made = DownStore.from_url(f"memory://{namespace}", namespace)
    assert isinstance(made, DownStore)
    return made


async def won_by_a(store: Store, *ticks: int, job: str = "j") -> None:
    claims = [Claim(job, t, 60_000) for t in ticks]
    assert await store.claim(claims, A) == [True] * len(ticks)


async def test_claims_lost_to_a_departed_winner_are_taken_over_once(store: DownStore) -> None:
    await won_by_a(store, 998, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.lost("j", 998, NOW)
    takeovers.lost("j", 999, NOW)
    assert not takeovers.due(0)
    takeovers.departed({"a", "b"})  # this node's own id is never a departure
    assert takeovers.due(0)
    taken = await takeovers.take(store, B, now=NOW, now_mono=0)
    assert taken == {"j": [998, 999]}
    assert takeovers.taken == 2
    assert await store.read_claims([Claim("j", 998, 0), Claim("j", 999, 0)], B) == [True, True]
    assert not takeovers.due(0)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW, now_mono=0) == {}  # nothing left to take


async def test_claims_of_live_or_deciding_winners_are_left_alone(store: DownStore) -> None:
    await won_by_a(store, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.lost("j", 999, NOW)
    takeovers.departed({"c"})  # another node left; a is alive
    assert await takeovers.take(store, B, now=NOW, now_mono=0) == {}
    assert await store.read_claims([Claim("j", 999, 0)], A) == [True]


async def test_a_lost_claim_is_forgotten_after_keep_s(store: DownStore) -> None:
    await won_by_a(store, 990, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.lost("j", 990, NOW - 10)
    takeovers.lost("j", 999, NOW)  # drops 990: older than keep_s
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW, now_mono=0) == {"j": [999]}
    assert await store.read_claims([Claim("j", 990, 0)], A) == [True]


async def test_a_store_that_does_not_answer_is_asked_again_later(store: DownStore) -> None:
    await won_by_a(store, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.lost("j", 999, NOW)
    takeovers.departed({"a"})
    store.down = True
    assert await takeovers.take(store, B, now=NOW, now_mono=10) == {}
    assert not takeovers.due(10 + RETRY_AFTER_S / 2)
    assert takeovers.due(10 + RETRY_AFTER_S)
    store.down = False
    assert await takeovers.take(store, B, now=NOW, now_mono=12) == {"j": [999]}


async def test_an_orphaned_tick_held_by_a_departed_racer_is_taken_over(store: DownStore) -> None:
    """racers = k: every racer of tick 999 left, a having won it and died undecided. This
    node lost no claim of it (it did not race it); it is about to race it as an orphan,
    and must take a's claim over first, or lose the race to a dead winner."""
    await won_by_a(store, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW, now_mono=0) == {}  # nothing lost here
    orphans = {"j": [998, 999]}
    assert takeovers.due(0, orphans)
    taken = await takeovers.take(store, B, now=NOW + 1, now_mono=1, orphans=orphans)
    assert taken == {"j": [999]}  # 998: nobody holds its claim; raced as it is
    assert not takeovers.due(2, {})
    # A departure is looked back on for keep_s only.
    assert await takeovers.take(store, B, now=NOW + 6, now_mono=6, orphans=orphans) == {}
    assert not takeovers.due(7, orphans)


async def test_a_claim_taken_over_names_the_backlog_its_lost_plan_covered(
    store: DownStore,
) -> None:
    """One claim, on the newest due tick, decides a backlog: the taker must decide from the
    oldest tick its own lost plan covered (issue 21's write pause lost tick 998 here)."""
    await won_by_a(store, 999)
    takeovers = Takeovers("b", keep_s=5)
    takeovers.lost("j", 990, NOW - 10, first_s=985)  # forgotten after keep_s, with its backlog
    takeovers.lost("j", 999, NOW, first_s=997)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW, now_mono=0) == {"j": [999]}
    assert takeovers.covered("j", 999) == 997
    assert takeovers.covered("j", 999) == 999  # told once
    assert takeovers.covered("j", 990) == 990


async def test_a_node_departing_again_has_its_new_claims_taken_over(store: DownStore) -> None:
    """a departed (frozen), came back, won tick 999 and went silent again before deciding
    it. Its first departure's time was kept (``setdefault``), older than keep_s: the second
    departure was dropped with it and the claim never looked at (failed before: {})."""
    takeovers = Takeovers("b", keep_s=5)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW - 10, now_mono=0) == {}
    await won_by_a(store, 999)
    takeovers.lost("j", 999, NOW)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW, now_mono=10) == {"j": [999]}


async def test_a_claim_another_node_took_over_is_taken_again_when_that_node_departs(
    store: DownStore,
) -> None:
    """a won tick 999 and froze; b and c had lost it. c took it over first and froze too,
    before deciding it. b must take it from c when c departs, though that comes more than
    keep_s after the tick (c's silence is seen 2.5 heartbeats after it took the claim);
    it had forgotten the claim by then (failed before: {}), and nobody decided the tick.
    With its backlog: c's decision would have covered it."""
    await won_by_a(store, 999)
    c = Owner("c", "3")
    b_side, c_side = Takeovers("b", keep_s=5), Takeovers("c", keep_s=5)
    for side in (b_side, c_side):
        side.lost("j", 999, NOW, first_s=997)
        side.departed({"a"})
    assert await c_side.take(store, c, now=NOW + 3, now_mono=0) == {"j": [999]}
    assert await b_side.take(store, B, now=NOW + 3, now_mono=0) == {}  # c was first
    b_side.lost("j", 1_007, NOW + 7)  # drops 999 from the lost claims: older than keep_s
    b_side.departed({"c"})
    assert await b_side.take(store, B, now=NOW + 7, now_mono=1) == {"j": [999]}
    assert b_side.covered("j", 999) == 997
    assert await store.read_claims([Claim("j", 999, 0)], B) == [True]


async def test_a_claim_looked_at_is_watched_for_keep_s_and_three_links_at_most(
    store: DownStore,
) -> None:
    """A claim looked at and not taken is watched keep_s from the look, and not once its
    tick is WATCH_LINKS keep_s old: a fleet that keeps losing members does not look at
    every claim it ever lost again at each departure."""
    c = Owner("c", "3")

    async def watched_until(job: str, looks: tuple[float, ...], at: float) -> dict[str, list[int]]:
        """b lost ``job``'s tick NOW to a, looked at it at each of ``looks`` (others
        departed), then c took it and departed; what b takes at ``at``."""
        await won_by_a(store, int(NOW), job=job)
        takeovers = Takeovers("b", keep_s=5)
        takeovers.lost(job, int(NOW), NOW)
        for i, look in enumerate(looks):
            takeovers.departed({f"x{i}"})
            assert await takeovers.take(store, B, now=look, now_mono=look) == {}
        assert await store.take_over([Claim(job, int(NOW), 0)], {"a"}, c) == [A]
        takeovers.departed({"c"})
        return await takeovers.take(store, B, now=at, now_mono=at)

    assert await watched_until("j1", (NOW + 1,), NOW + 5.5) == {"j1": [1_000]}
    assert await watched_until("j2", (NOW + 1,), NOW + 6.5) == {}  # 5 s after the look
    looks = (NOW + 4, NOW + 8, NOW + 12, NOW + 16)  # the last, past 15 s: not watched anew
    assert await watched_until("j3", looks, NOW + 16.5) == {"j3": [1_000]}
    assert await watched_until("j4", looks, NOW + 17.5) == {}


async def test_a_claim_lost_late_is_remembered_from_when_it_was_lost(store: DownStore) -> None:
    """racers = k: b became a racer of tick 1,000 when a (its winner) left, and lost its
    late claim to c, which had just taken a's claim over and died before deciding it. c's
    silence is seen keep_s after that, more than keep_s after the tick: the lost claim
    must still be remembered (the real-process chain of takeovers, racers = 2: the tick
    ran nowhere)."""
    await won_by_a(store, 1_000)
    c = Owner("c", "3")
    assert await store.take_over([Claim("j", 1_000, 0)], {"a"}, c) == [A]
    takeovers = Takeovers("b", keep_s=5)
    takeovers.departed({"a"})
    assert await takeovers.take(store, B, now=NOW + 1, now_mono=0) == {}  # nothing lost yet
    takeovers.lost("j", 1_000, NOW + 2)
    takeovers.departed({"c"})
    assert await takeovers.take(store, B, now=NOW + 6.5, now_mono=1) == {"j": [1_000]}
