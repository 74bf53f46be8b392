"""Real agent processes: a winner stopped between its claim and its decision.

Issue 21's known gap: a node that wins a tick's claim and dies (or freezes) before its
decision reaches Redis took the tick with it: every other node had lost that claim and
moved on, and the next tick's decision passed it. The window is made reproducible here:
node ``n0`` stops itself (SIGSTOP, tests/faults/app.py) right after winning a claim of
the job, once the test arms it, and writes the tick down first. Then either

- it is SIGKILLed (a crash between claim and decision): a live node must take the claim
  over once n0's heartbeat goes silent, and fire the tick, late by at most about 2.5
  heartbeats (tick/takeover.py); or
- it is let go on (SIGCONT) seconds later, past that bound, and sends its late decision:
  the tick has run on another node meanwhile, and the late decision must be refused
  (``stale``), not run it a second time.

Both with ``catchup = "all"``, judged from the witness: every tick once, none twice; on
Redis and on PostgreSQL (the witness stays on a redis-server no fault touches).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

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
#: The takeover's bound: 2.5 heartbeats after the winner's last beat (1.25 s here), plus
#: round trips; measured 0.4-1.1 s on the loaded 2-core machine. Printed, not asserted: a
#: machine at load 20 stretches heartbeats and round trips alike.
LATE_BOUND_S = 2.5 * HEARTBEAT_S
#: How long a frozen winner stays frozen before it is let go on: well past the bound. The
#: tick must have fired elsewhere before (on the code before the takeover, the thawed
#: winner ran it itself, this late).
FROZEN_S = 6.0


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
        # The thawed case covers both the takeover and the refusal; PostgreSQL's killed
        # case (measured when it was added: 0 lost, 0.87 s late) stays out of the suite's
        # ten minutes.
        pytest.param("postgres", "thawed", marks=pytest.mark.postgres),
    ],
    indirect=["fleet_url"],
)
def test_a_winner_stopped_between_claim_and_decision_loses_no_tick_and_fires_none_twice(
    fleet_url: str, namespace: str, witness: Witness, tmp_path: Path, then: str
) -> None:
    procs = start_fleet(fleet_url, namespace, witness, tmp_path)
    try:
        first_s = fleet_running(witness, tmp_path)
        (tmp_path / "arm").write_text("")
        mark = tmp_path / "mark"
        wait_until(mark.exists, timeout_s=30, what="n0 winning a claim and stopping")
        time.sleep(0.05)  # the mark is written just before SIGSTOP
        frozen_tick = int(mark.read_text().split()[0])
        if then == "killed":
            procs[0].send_signal(signal.SIGKILL)
        else:
            time.sleep(FROZEN_S)
            procs[0].send_signal(signal.SIGCONT)
        last_s = frozen_tick + int(FROZEN_S) + 4
        running_past(witness, last_s)
        time.sleep(1.0)  # a late decision of n0 (thawed) lands meanwhile
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    runs = [e for e in events if e["job"] == JOB and e["tick"] == frozen_tick]
    starts = [e for e in runs if e["event"] == "start"]
    late_s = [round(e["wall"] - frozen_tick, 2) for e in starts]
    records = records_of(fleet_url, namespace, JOB)
    mine = [(r.node, r.outcome) for r in records if r.tick_s == frozen_tick]
    print(
        verdict.summary(),
        f"tick {frozen_tick}: started {late_s} s late on "
        f"{[e['node'] for e in starts]} (bound {LATE_BOUND_S} s + round trips); records {mine}",
        sep="\n",
    )
    assert (verdict.duplicates, verdict.missed) == ([], []), verdict.summary()
    assert [e["node"] for e in starts] != ["n0"], "the stopped winner ran its tick itself"
    assert late_s[0] < FROZEN_S, f"tick {frozen_tick} fired {late_s[0]} s late"
    if then == "thawed":
        # n0's late decision reached Redis and was refused: a stale record, no run.
        assert ("n0", "stale") in mine, mine


def running_past(witness: Witness, last_s: int) -> None:
    """Wait until the job ran a tick at or after ``last_s`` (past the stopped winner's)."""
    witness.wait_for(
        lambda evs: any(e["job"] == JOB and e["tick"] >= last_s for e in evs),
        timeout_s=30,
        what="the job running past the stopped winner's tick",
    )


def fleet_running(witness: Witness, tmp_path: Path, nodes: int = 3) -> int:
    """Wait until the agents started and the job runs; return the first tick judged (one
    after they started: on a loaded machine start-up takes seconds, whose ticks no agent
    was up to count)."""
    wait_until(
        lambda: sum("agent started" in p.read_text() for p in tmp_path.glob("*.err")) == nodes,
        timeout_s=40,
        what="the agents started",
    )
    first_s = int(time.time()) + 2
    witness.wait_for(
        lambda evs: any(e["job"] == JOB and e["tick"] >= first_s for e in evs),
        timeout_s=20,
        what="the job running on the fleet",
    )
    return first_s


def frozen_winner(tmp_path: Path) -> int:
    """Arm n0's freeze; return the tick it won and stopped at."""
    (tmp_path / "arm").write_text("")
    mark = tmp_path / "mark"
    wait_until(mark.exists, timeout_s=30, what="n0 winning a claim and stopping")
    time.sleep(0.05)  # the mark is written just before SIGSTOP
    return int(mark.read_text().split()[0])


#: A heartbeat long enough that n0's silence is not read before its claim has expired: a
#: takeover comes 2.5 heartbeats (10 s) after its last beat, the claim runs out after the
#: catch-up window and the skew tolerance, plus a second (2 s).
LONG_HEARTBEAT_S = 4.0
CLAIM_OUTLIVED_S = 4.0


@pytest.mark.timeout(120)
def test_a_winner_thawed_after_its_claim_expired_has_its_tick_recorded_missed_once(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    """n0 stops right after winning a tick and goes on only after that claim has expired
    (before any node reads it silent); n1 and n2 decide the next ticks meanwhile, passing
    the tick. n0's late decision can no longer show the claim was its own: it used to be
    refused (``stale``) and no record counted the tick (the scheduler model found it). The
    tick is recorded ``missed`` once, it runs nowhere, and no other tick is lost or doubled.
    """
    procs = start_fleet(
        redis_server.url,
        namespace,
        witness,
        tmp_path,
        CRONRACE_HEARTBEAT_S=str(LONG_HEARTBEAT_S),
        CRONRACE_SKEW_TOLERANCE_S="0",
        FAULT_EXTRA_CATCHUP_WINDOW="1",
    )
    try:
        first_s = fleet_running(witness, tmp_path)
        frozen_tick = frozen_winner(tmp_path)
        time.sleep(CLAIM_OUTLIVED_S)
        procs[0].send_signal(signal.SIGCONT)
        last_s = frozen_tick + int(CLAIM_OUTLIVED_S) + 4

        def decided() -> bool:
            return any(
                r.tick_s == frozen_tick for r in records_of(redis_server.url, namespace, JOB)
            )

        wait_until(decided, timeout_s=20, what="n0's late decision of its tick")
        running_past(witness, last_s)
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    mine = [
        (r.node, r.outcome.value)
        for r in records_of(redis_server.url, namespace, JOB)
        if r.tick_s == frozen_tick
    ]
    print(verdict.summary(), f"tick {frozen_tick}: records {mine}", sep="\n")
    assert verdict.duplicates == [], verdict.summary()
    # Run nowhere, as recorded. (A 1 s catch-up window on a loaded machine may miss other
    # ticks too; those are the catch-up policy's, recorded by the nodes that came late.)
    assert frozen_tick in verdict.missed, verdict.summary()
    assert mine == [("n0", "missed")], mine


#: The job's catch-up window in the test below: n0's acquire is retried until it ends.
SHORT_WINDOW_S = 2


@pytest.mark.timeout(120)
def test_a_won_tick_whose_decision_never_got_through_is_recorded_missed(
    fresh_redis: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    """n0, alone, wins a tick and stops (SIGSTOP) before deciding it; redis-server is shut
    down, and n0 let go on: its acquire fails until the tick leaves its 2-s catch-up window,
    and it gives the decision up ("it will not run"). Redis comes back two seconds later.
    The tick must be counted by a ``missed`` record: the scheduler model found it counted in
    nothing (the loop planned on from the next tick; its backlog's record left it out).
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
            lambda: "it will not run" in log.read_text(),
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
    mine = [(r.tick_s - frozen_tick, r.outcome.value, r.count) for r in records]
    assert counted == len(verdict.missed), (counted, verdict.summary(), mine)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("racers", ["all", "2"])
def test_a_claim_taken_over_by_a_node_that_stops_too_is_taken_over_again(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path, racers: str
) -> None:
    """A node stops right after winning a tick and is killed; the node that takes its claim
    over stops too, about to decide it, and is killed. The last node must take the claim
    over from the taker and fire the tick (catch-up all). Lost claims were remembered
    keep_s from their tick: with ``racers = 2`` the last node, a racer only since the
    winner left, lost its late claim of the tick to the taker and had forgotten it by the
    taker's departure (1 run in 3 failed so; the tick ran nowhere and nothing recorded
    it). With ``racers = all`` the taker's departure can come after keep_s too (when the
    winner's was seen late); here it came within (3 of 3 passed before). The scheduler
    model with racers = 2 found the chain (tick/takeover.py, tick/share.py)."""
    taken_mark = tmp_path / "taken"
    procs = start_fleet(  # every node may stop as the winner: with racers = 2, n0 may race none
        redis_server.url,
        namespace,
        witness,
        tmp_path,
        CRONRACE_RACERS=racers,
        FAULT_FREEZE_TAKEN_FROM=str(tmp_path / "mark"),
        FAULT_FREEZE_TAKEN_JOB=JOB,
        FAULT_FREEZE_TAKEN_MARK=str(taken_mark),
        everyone_may_freeze=True,
    )
    try:
        first_s = fleet_running(witness, tmp_path)
        frozen_tick = frozen_winner(tmp_path)
        winner_pid = int((tmp_path / "mark").read_text().split()[2])
        next(p for p in procs if p.pid == winner_pid).send_signal(signal.SIGKILL)
        wait_until(taken_mark.exists, timeout_s=20, what="a node taking the claim and stopping")
        time.sleep(0.05)  # the mark is written just before SIGSTOP
        taker_pid = int(taken_mark.read_text().split()[0])
        taker = next(p for p in procs if p.pid == taker_pid)
        taker.send_signal(signal.SIGKILL)
        last_s = frozen_tick + 12
        running_past(witness, last_s)
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, JOB, first_tick_s=first_s, last_tick_s=last_s, leased=True)
    starts = [e for e in events if e["job"] == JOB and e["tick"] == frozen_tick]
    starts = [e for e in starts if e["event"] == "start"]
    last = [f"n{i}" for i, p in enumerate(procs) if p.pid not in (taker_pid, winner_pid)]
    print(
        verdict.summary(),
        f"tick {frozen_tick}: started {[round(e['wall'] - frozen_tick, 2) for e in starts]} s "
        f"late on {[e['node'] for e in starts]}; taker killed: pid {taker_pid}",
        sep="\n",
    )
    assert (verdict.duplicates, verdict.missed) == ([], []), verdict.summary()
    assert [e["node"] for e in starts] == last, (starts, last)
