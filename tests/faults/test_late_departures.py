"""racers = 2 of 3 real processes whose heartbeats all fail at once while their claims
would go through. On the dense cursor a node whose own beats fail still claims (the
watermark protocol's rule that it claim nothing, ``counted_live``, served the takeovers of
a dead winner's claim, which are gone: a tick nobody decided stays above the cursor and the
job's next decision covers it). Each node then counts the other two departed and races
every job itself; the claims still let one node decide each tick. Then the one node that
was not among the job's racers beats again (its first race of the job refused, in the
``unanswered`` case). Each tick ran once or is counted by a ``missed`` record, none ran
twice, and every tick has exactly one decision record. (The watermark protocol's version of
this test left the job unraced for 80 s, past the 64 ticks a departure listed: that list is
gone with the orphan bookkeeping of tick/share.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cronrace.fleet.racers import Ring, placement_start_s
from tests.faults.test_dead_winner import not_decided_once, records_of
from tests.faults.test_racers import wait_live
from tests.faults.witness import Witness, judge, start_node, stop_all
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NODES = ["d0", "d1", "d2"]
JOBS = ["extra000", "extra001", "extra002"]
#: How long every beat fails: many heartbeats, so every node counts the others departed.
ALL_FAILING_S = 20


def job_and_outsider(now_s: int, until_s: int) -> tuple[str, str]:
    """A job whose racers stay the same from ``now_s`` to ``until_s`` (one placement
    window), and the node that is not one of them."""
    ring = Ring.build(NODES)
    for job in JOBS:
        if placement_start_s(job, now_s) == placement_start_s(job, until_s):
            racers = ring.racers(job, now_s, 2)
            return job, next(node for node in NODES if node not in racers)
    raise AssertionError("every job's placement window turns within the test")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("orphan_race", ["answered", "unanswered"])
def test_ticks_nobody_raced_while_every_beat_failed_are_each_run_or_counted(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path, orphan_race: str
) -> None:
    """``unanswered``: the returning node's first race of the job gets no answer (Redis
    refused it); the ticks must still each be run or counted."""
    url = redis_server.url
    fail = {node: tmp_path / f"{node}.fail" for node in NODES}
    refuse = tmp_path / "refuse-claims"
    procs = [
        start_node(
            url,
            namespace,
            node,
            witness,
            env={
                "CRONRACE_RACERS": "2",
                "FAULT_CODE_JOBS": "",
                "FAULT_EXTRA_JOBS": str(len(JOBS)),
                "FAULT_EXTRA_CATCHUP": "latest",
                "FAULT_BEATS_FAIL_FILE": str(fail[node]),
                "FAULT_CLAIMS_FAIL_FILE": str(refuse),
                "CRONRACE_LOG_FORMAT": "text",
            },
            stderr_dir=tmp_path,
        )
        for node in NODES
    ]
    try:
        wait_live(url, namespace, set(NODES))
        now_s = int(time.time())
        job, outsider = job_and_outsider(now_s, now_s + ALL_FAILING_S + 60)
        witness.wait_for(
            lambda evs: any(e["job"] == job for e in evs), timeout_s=20, what="the job running"
        )
        first_s = int(time.time()) + 1
        for path in fail.values():
            path.write_text("")
        time.sleep(ALL_FAILING_S)
        if orphan_race == "unanswered":
            refuse.write_text(job)  # the others claim nothing: their beats still fail
        fail[outsider].unlink()
        back_s = int(time.time())
        witness.wait_for(
            lambda evs: any(e["job"] == job and e["tick"] >= back_s + 3 for e in evs),
            timeout_s=30,
            what=f"{outsider} running {job} again",
        )
        last_s = back_s + 3
    finally:
        stop_all(procs)
    events = witness.events()
    verdict = judge(events, job, first_tick_s=first_s, last_tick_s=last_s)
    records = records_of(url, namespace, job)
    counted = sum(r.count for r in records if r.outcome.value == "missed" and r.tick_s >= first_s)
    counts = [(r.tick_s - first_s, r.count) for r in records if r.outcome.value == "missed"]
    print(verdict.summary(), f"{outsider} back at {back_s - first_s}; missed records {counts}")
    said = (tmp_path / f"{outsider}.err").read_text().splitlines()
    wanted = ("members changed", "members left", "missed", "go through", "claims failed")
    print(*(line for line in said if any(w in line for w in wanted)), sep="\n")
    if orphan_race == "unanswered":
        assert not refuse.exists(), "the job's claims were never refused"
    assert verdict.duplicates == [], verdict.summary()
    # Every tick that ran nowhere is counted, exactly, and every tick decided once.
    assert counted == len(verdict.missed), (counted, verdict.summary())
    assert not_decided_once(records, first_s, last_s) == [], not_decided_once(
        records, first_s, last_s
    )
