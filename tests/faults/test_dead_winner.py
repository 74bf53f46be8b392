"""Real agent processes: a winner stopped between its claim and its decision.

Node ``n0`` stops itself (SIGSTOP, tests/faults/app.py) right after winning a claim of
the job, once the test arms it, and writes the tick down first. On the dense cursor
(docs/design.md section 3) nobody takes a dead winner's claim over: its tick stays above
the job's cursor, the claim runs out after ``undecided_claim_s``, and the job's next
decision, on whichever node, covers the tick (runs it, catch-up ``all``, or records it
``missed`` past its window); for a job whose period is longer than ``undecided_claim_s``
the node second in line claims the tick again first. Then either

- n0 is SIGKILLed (a crash between claim and decision); or
- it is let go on (SIGCONT) seconds later and sends its late decision: the cursor has
  passed the tick, the answer is ``covered`` and writes nothing, and nothing runs twice.

Judged from the witness (every tick once, none twice) and from the store: every tick has
exactly one decision record (I-cursor), none of them n0's late one. On Redis and on
PostgreSQL (the witness stays on a redis-server no fault touches).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.stores.urls import open_store
from tests.conftest import upgrade_schema
from tests.faults.witness import Witness, judge, start_node, stop_all
from tests.postgres_server import PostgresServer, postgres_available
from tests.redis_server import RedisServer
from tests.topology import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

JOB = "extra000"
HEARTBEAT_S = 0.5
#: How long a frozen winner stays frozen before it is let go on: well past the job's next
#: tick (1 s), whose decision covers the frozen one. The tick must have run elsewhere
#: before (had the thawed winner's decision been taken, it would have run it this late).
FROZEN_S = 6.0

#: The outcomes a run's result is recorded with (the second record of a run); every other
#: outcome is a decision's, one per tick it covers.
RESULTS = frozenset(
    {Outcome.OK, Outcome.ERROR, Outcome.CANCELLED, Outcome.LEASE_LOST, Outcome.ABANDONED}
)


def decisions_of(records: list[RunRecord], tick_s: int) -> list[RunRecord]:
    """The decision records that cover ``tick_s`` (a ``missed`` record names a range). A
    ``queued`` record is followed by the tick's own decision once it comes (``granted``
    when it starts, ``skipped:overlap`` when a newer tick displaces it): that one counts."""
    found = [
        r
        for r in records
        if r.outcome not in RESULTS and r.tick_s <= tick_s <= max(r.tick_s, r.last_tick_s)
    ]
    settled = [r for r in found if r.outcome != Outcome.QUEUED]
    return settled or found


def not_decided_once(
    records: list[RunRecord], first_s: int, last_s: int, every_s: int = 1
) -> list[tuple[int, list[str]]]:
    """Ticks in [first_s, last_s] without exactly one decision record: (tick, outcomes)."""
    return [
        (tick, [r.outcome.value for r in decisions_of(records, tick)])
        for tick in range(first_s, last_s + 1, every_s)
        if len(decisions_of(records, tick)) != 1
    ]


@pytest.fixture
def fleet_url(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[str]:
    """Where the fleet meets: the test's redis-server, or a PostgreSQL server of its own."""
    if request.param == "redis":
        yield redis_server.url
        return
    if not postgres_available():
        pytest.skip("PostgreSQL not installed")
    server = PostgresServer()
    try:
        server.start()
        upgrade_schema(server.url)
        yield server.url
    finally:
        server.cleanup()


def records_of(url: str, namespace: str, job: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        store = open_store(url, namespace)
        try:
            return await store.history(job, 500)
        finally:
            await store.aclose()

    return anyio.run(read)


def start_fleet(  # type: ignore[type-arg]
    url: str,
    namespace: str,
    witness: Witness,
    tmp_path: Path,
    *,
    everyone_may_freeze: bool = False,
    **more: str,
) -> list:
    env = {
        "FAULT_CODE_JOBS": "",
        "FAULT_EXTRA_JOBS": "1",
        "FAULT_EXTRA_CATCHUP": "all",
        "FAULT_EXTRA_OVERLAP": "queue_one",
        "CRONRACE_HEARTBEAT_S": str(HEARTBEAT_S),
        "CRONRACE_LOG_FORMAT": "text",
        **more,
    }
    freeze = {
        "FAULT_FREEZE_AFTER_CLAIM": JOB,
        "FAULT_FREEZE_ARM": str(tmp_path / "arm"),
        "FAULT_FREEZE_MARK": str(tmp_path / "mark"),
    }
    return [
        start_node(
            url,
            namespace,
            f"n{i}",
            witness,
            env={**env, **(freeze if i == 0 or everyone_may_freeze else {})},
            stderr_dir=tmp_path,
        )
        for i in range(3)
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fleet_url", "then"),
    [
        ("redis", "killed"),
        ("redis", "thawed"),
        # The thawed case covers both the next decision's cover and the late answer
        # (covered, nothing written); PostgreSQL's killed case stays out of the suite's
        # ten minutes.
        pytest.param("postgres", "thawed", marks=pytest.mark.postgres),
    ],
    indirect=["fleet_url"],
)
def test_a_winner_stopped_between_claim_and_decision_loses_no_tick_and_fires_none_twice(
    fleet_url: str, namespace: str, witness: Witness, tmp_path: Path, then: str
) -> None:
    procs = start_fleet(fleet_url, namespace, witness, tmp_path)
    thawed_at = None
    try:
        first_s = fleet_running(witness, tmp_path)
        frozen_tick = frozen_winner(tmp_path)
        if then == "killed":
            procs[0].send_signal(signal.SIGKILL)
        else:
            time.sleep(FROZEN_S)
            thawed_at = time.time()
            procs[0].send_signal(signal.SIGCONT)
        last_s = frozen_tick + int(FROZEN_S) + 4
        running_past(witness, last_s)
        if thawed_at is not None:
            # n0 goes on past its late decision: it runs a tick again (a third of them
            # are its own to win), so its answer came back meanwhile.
            witness.wait_for(
                lambda evs: any(e["node"] == "n0" and e["wall"] > thawed_at for e in evs),
                timeout_s=30,
                what="the thawed n0 running a tick again",
            )
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    runs = [e for e in events if e["job"] == JOB and e["tick"] == frozen_tick]
    starts = [e for e in runs if e["event"] == "start"]
    late_s = [round(e["wall"] - frozen_tick, 2) for e in starts]
    records = records_of(fleet_url, namespace, JOB)
    mine = [(r.node, r.outcome.value) for r in records if r.tick_s == frozen_tick]
    print(
        verdict.summary(),
        f"tick {frozen_tick}: started {late_s} s late on {[e['node'] for e in starts]}; "
        f"records {mine}",
        sep="\n",
    )
    assert (verdict.duplicates, verdict.missed) == ([], []), verdict.summary()
    assert [e["node"] for e in starts] != ["n0"], "the stopped winner ran its tick itself"
    assert late_s[0] < FROZEN_S, f"tick {frozen_tick} fired {late_s[0]} s late"
    # The next decision covered the tick: one `granted` record, another node's; n0's late
    # decision (thawed) was answered `covered` and wrote nothing.
    assert [(r.node, r.outcome) for r in decisions_of(records, frozen_tick)] == [
        (starts[0]["node"], Outcome.GRANTED)
    ], mine
    assert all(node != "n0" for node, _outcome in mine), mine
    assert not_decided_once(records, first_s, last_s) == [], not_decided_once(
        records, first_s, last_s
    )


def running_past(witness: Witness, last_s: int) -> None:
    """Wait until the job ran a tick at or after ``last_s`` (past the stopped winner's)."""
    witness.wait_for(
        lambda evs: any(e["job"] == JOB and e["tick"] >= last_s for e in evs),
        timeout_s=30,
        what="the job running past the stopped winner's tick",
    )


def fleet_running(witness: Witness, tmp_path: Path, nodes: int = 3, every_s: int = 1) -> int:
    """Wait until the agents started and the job runs; return the first tick judged (one
    after they started: on a loaded machine start-up takes seconds, whose ticks no agent
    was up to count)."""
    wait_until(
        lambda: sum("agent started" in p.read_text() for p in tmp_path.glob("*.err")) == nodes,
        timeout_s=40,
        what="the agents started",
    )
    first_s = -(-(int(time.time()) + 2) // every_s) * every_s
    witness.wait_for(
        lambda evs: any(e["job"] == JOB and e["tick"] >= first_s for e in evs),
        timeout_s=20 + every_s,
        what="the job running on the fleet",
    )
    return first_s


def frozen_winner(tmp_path: Path, timeout_s: float = 30) -> int:
    """Arm n0's freeze; return the tick it won and stopped at."""
    (tmp_path / "arm").write_text("")
    mark = tmp_path / "mark"
    wait_until(mark.exists, timeout_s=timeout_s, what="n0 winning a claim and stopping")
    time.sleep(0.05)  # the mark is written just before SIGSTOP
    return int(mark.read_text().split()[0])


#: The job's catch-up window in the test below: shorter than the job's period, so that the
#: next decision (a second after the frozen tick) finds the tick past it.
HALF_WINDOW_S = 0.5
FROZEN_PAST_WINDOW_S = 4.0


@pytest.mark.timeout(120)
def test_a_winner_frozen_past_its_ticks_window_has_it_recorded_missed_once(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    """n0 stops right after winning a tick and goes on only after its claim ran out; n1
    and n2 decide the next ticks meanwhile. The job's next decision finds the frozen tick
    past its catch-up window: one ``missed`` record covers it (a range from the cursor),
    it runs nowhere, and n0's late decision is answered ``covered`` and writes nothing.
    (On the watermark protocol the thawed decision was refused ``stale`` and no record
    counted the tick; the scheduler model found it.)
    """
    procs = start_fleet(
        redis_server.url,
        namespace,
        witness,
        tmp_path,
        CRONRACE_SKEW_TOLERANCE_S="0",
        FAULT_EXTRA_CATCHUP_WINDOW=str(HALF_WINDOW_S),
    )
    try:
        first_s = fleet_running(witness, tmp_path)
        frozen_tick = frozen_winner(tmp_path)
        time.sleep(FROZEN_PAST_WINDOW_S)
        thawed_at = time.time()
        procs[0].send_signal(signal.SIGCONT)
        last_s = frozen_tick + int(FROZEN_PAST_WINDOW_S) + 4
        running_past(witness, last_s)
        witness.wait_for(
            lambda evs: any(e["node"] == "n0" and e["wall"] > thawed_at for e in evs),
            timeout_s=30,
            what="the thawed n0 running a tick again",
        )
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    records = records_of(redis_server.url, namespace, JOB)
    covering = [
        (r.node, r.outcome.value, r.tick_s - frozen_tick, r.count)
        for r in decisions_of(records, frozen_tick)
    ]
    mine = [(r.node, r.outcome.value) for r in records if r.tick_s == frozen_tick]
    print(verdict.summary(), f"tick {frozen_tick}: covered by {covering}", sep="\n")
    assert verdict.duplicates == [], verdict.summary()
    # Run nowhere, as recorded, by another node. (A half-second window on a loaded
    # machine may miss other ticks too: recorded missed by the nodes that came late.)
    assert frozen_tick in verdict.missed, verdict.summary()
    assert [(node, outcome) for node, outcome, _at, _n in covering] in (
        [("n1", "missed")],
        [("n2", "missed")],
    ), covering
    assert all(node != "n0" for node, _outcome in mine), mine
    # Every tick has one decision record, and what ran nowhere is exactly what is missed.
    assert not_decided_once(records, first_s, last_s) == [], not_decided_once(
        records, first_s, last_s
    )
    missed = {
        t for t in range(first_s, last_s + 1) if decisions_of(records, t)[0].outcome == "missed"
    }
    assert missed == set(verdict.missed), (sorted(missed), verdict.summary())


#: The job's catch-up window in the test below: n0's decision is retried until it ends.
SHORT_WINDOW_S = 2


@pytest.mark.timeout(120)
def test_a_won_tick_whose_decision_never_got_through_is_recorded_missed(
    fresh_redis: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    """n0, alone, wins a tick and stops (SIGSTOP) before deciding it; redis-server is shut
    down, and n0 let go on: its decision fails until the tick leaves its 2-s catch-up
    window, and it gives the decision up (the job's next decision covers its ticks). Redis
    comes back two seconds later. The tick, and those of the outage, are above the cursor:
    the next decision records them in one ``missed`` range with their count (the watermark
    protocol had planned on from the next tick and counted the tick in nothing).
    """
    procs = [
        start_node(
            fresh_redis.url,
            namespace,
            "n0",
            witness,
            env={
                "FAULT_CODE_JOBS": "",
                "FAULT_EXTRA_JOBS": "1",
                "FAULT_EXTRA_CATCHUP": "all",
                "FAULT_EXTRA_CATCHUP_WINDOW": str(SHORT_WINDOW_S),
                "CRONRACE_SKEW_TOLERANCE_S": "0",
                "CRONRACE_REDIS_TIMEOUT_S": "0.5",
                "CRONRACE_LOG_FORMAT": "text",
                "FAULT_FREEZE_AFTER_CLAIM": JOB,
                "FAULT_FREEZE_ARM": str(tmp_path / "arm"),
                "FAULT_FREEZE_MARK": str(tmp_path / "mark"),
            },
            stderr_dir=tmp_path,
        )
    ]
    try:
        first_s = fleet_running(witness, tmp_path, nodes=1)
        frozen_tick = frozen_winner(tmp_path)
        fresh_redis.stop()
        procs[0].send_signal(signal.SIGCONT)
        log = tmp_path / "n0.err"
        wait_until(
            lambda: "kept failing until its deadline" in log.read_text(),
            timeout_s=20,
            what="n0 giving its decision up",
        )
        time.sleep(2.0)
        fresh_redis.start()
        last_s = int(time.time()) + 3
        witness.wait_for(
            lambda evs: any(e["job"] == JOB and e["tick"] >= last_s for e in evs),
            timeout_s=30,
            what="the job running again",
        )
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    records = records_of(fresh_redis.url, namespace, JOB)
    counted = sum(r.count for r in records if r.outcome.value == "missed" and first_s <= r.tick_s)
    print(verdict.summary(), f"tick {frozen_tick}; missed records count {counted}", sep="\n")
    assert verdict.duplicates == [], verdict.summary()
    assert frozen_tick in verdict.missed, verdict.summary()
    # Every tick that ran nowhere (n0's, and those of the outage) is counted, exactly.
    mine = [
        (r.tick_s - frozen_tick, r.last_tick_s - frozen_tick, r.outcome.value, r.count)
        for r in records
        if r.outcome not in RESULTS
    ]
    assert counted == len(verdict.missed), (counted, verdict.summary(), mine)
    assert [o for _t, o in decisions_of_outcomes(records, frozen_tick)] == ["missed"], mine
    assert not_decided_once(records, first_s, last_s) == [], (
        not_decided_once(records, first_s, last_s),
        mine,
    )


def decisions_of_outcomes(records: list[RunRecord], tick_s: int) -> list[tuple[int, str]]:
    return [(r.tick_s, r.outcome.value) for r in decisions_of(records, tick_s)]


#: A job whose period is longer than ``undecided_claim_s`` (3 s): a lost tick is claimed
#: again 3.5 s after it by the node second in line.
SLOW_SCHEDULE = "*/5 * * * * *"
SLOW_EVERY_S = 5


@pytest.mark.timeout(150)
@pytest.mark.parametrize("racers", ["all", "2"])
def test_a_dead_winners_tick_reclaimed_by_a_node_that_stops_too_is_covered_by_the_next(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path, racers: str
) -> None:
    """A 5-second job: its winner stops right after winning a tick and is killed; the node
    second in line claims the tick again once that claim ran out (3.5 s after the tick),
    stops too, about to decide it, and is killed. The last node must run the tick with the
    job's next decision (catch-up ``all``: the cursor still stands before it), once. With
    ``racers = 2`` the last node is a racer only once the others are counted departed.
    (This replaces the chain of takeovers of the watermark protocol.)"""
    taken_mark = tmp_path / "taken"
    procs = start_fleet(  # every node may stop as the winner: with racers = 2, n0 may race none
        redis_server.url,
        namespace,
        witness,
        tmp_path,
        CRONRACE_RACERS=racers,
        FAULT_EXTRA_SCHEDULE=SLOW_SCHEDULE,
        FAULT_FREEZE_TAKEN_FROM=str(tmp_path / "mark"),
        FAULT_FREEZE_TAKEN_JOB=JOB,
        FAULT_FREEZE_TAKEN_MARK=str(taken_mark),
        everyone_may_freeze=True,
    )
    try:
        first_s = fleet_running(witness, tmp_path, every_s=SLOW_EVERY_S)
        frozen_tick = frozen_winner(tmp_path, timeout_s=30)
        winner_pid = int((tmp_path / "mark").read_text().split()[2])
        next(p for p in procs if p.pid == winner_pid).send_signal(signal.SIGKILL)
        wait_until(taken_mark.exists, timeout_s=20, what="a node re-claiming the tick, stopping")
        time.sleep(0.05)  # the mark is written just before SIGSTOP
        taker_pid = int(taken_mark.read_text().split()[0])
        taker = next(p for p in procs if p.pid == taker_pid)
        taker.send_signal(signal.SIGKILL)
        last_s = frozen_tick + 3 * SLOW_EVERY_S
        running_past(witness, last_s)
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(
        events, JOB, first_tick_s=first_s, last_tick_s=last_s, every_s=SLOW_EVERY_S, leased=True
    )
    starts = [e for e in events if e["job"] == JOB and e["tick"] == frozen_tick]
    starts = [e for e in starts if e["event"] == "start"]
    last = [f"n{i}" for i, p in enumerate(procs) if p.pid not in (taker_pid, winner_pid)]
    records = records_of(redis_server.url, namespace, JOB)
    print(
        verdict.summary(),
        f"tick {frozen_tick}: started {[round(e['wall'] - frozen_tick, 2) for e in starts]} s "
        f"late on {[e['node'] for e in starts]}; re-claimer killed: pid {taker_pid}; "
        f"decided by {decisions_of_outcomes(records, frozen_tick)}",
        sep="\n",
    )
    assert (verdict.duplicates, verdict.missed) == ([], []), verdict.summary()
    assert [e["node"] for e in starts] == last, (starts, last)
    assert [(r.node, r.outcome) for r in decisions_of(records, frozen_tick)] == [
        (last[0], Outcome.GRANTED)
    ]
    assert not_decided_once(records, first_s, last_s, SLOW_EVERY_S) == [], not_decided_once(
        records, first_s, last_s, SLOW_EVERY_S
    )
