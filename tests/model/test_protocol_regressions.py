"""What the protocol model found, each as the steps hypothesis shrank it to.

Each test replays a failing example of ``tests/model/protocol.py`` step by step (the
``state.*`` lines hypothesis printed; the invariant runs after every step, as in the
machine). They failed before the fix named in their docstring.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cronrace.model.policies import Catchup
from tests.model.protocol import FakeRedisProtocolModel, ProtocolModel

pytestmark = pytest.mark.model

ALL_SKIP = {job: Catchup.SKIP for job in ("j-skip", "j-queue", "j-replace", "j-allow")}


class Steps:
    """Runs machine steps and checks the invariant after each, as hypothesis does."""

    def __init__(self, machine: ProtocolModel) -> None:
        self.machine = machine

    def __getattr__(self, name: str) -> object:
        step = getattr(self.machine, name)

        def run(**kwargs: object) -> None:
            step(**kwargs)
            self.machine.the_contract_holds()

        return run


@pytest.fixture(
    params=[
        pytest.param("fakeredis"),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def state(request: pytest.FixtureRequest) -> Iterator[Steps]:
    """Each case on fakeredis and on PostgreSQL (the same steps, the backend's hooks)."""
    model: type[ProtocolModel] = FakeRedisProtocolModel
    if request.param == "postgres":
        model = request.getfixturevalue("model_postgres")
    machine = model()
    yield Steps(machine)
    machine.teardown()


def test_fence_is_never_reissued_by_a_replica_that_lags(state: Steps) -> None:
    """A failover to a replica whose fence counter is a grant behind handed out that grant's
    fence again to a node that knew no higher one. Fixed: fences never go below the
    server's TIME in microseconds (DESIGN.md section 11), not only when the counter is
    missing."""
    state.define_jobs(catchup=ALL_SKIP)
    state.crash(node="a")
    state.a_job_never_stays_stuck(job="j-skip")
    state.crash(node="a")
    state.a_job_never_stays_stuck(job="j-skip")
    state.crash(node="a")
    state.time_passes(awake=[], grains=1, replica_syncs=True)
    state.a_job_never_stays_stuck(job="j-skip")
    state.crash(node="a")
    state.failover_to_a_lagging_replica(back=0)
    state.a_job_never_stays_stuck(job="j-skip")


def test_a_queued_trigger_runs_as_that_trigger_not_as_a_tick(state: Steps) -> None:
    """A manual trigger queued (queue_one) behind the run of the tick decided in the same
    wake-up was handed on as a plain tick, equal to that tick: the tick ran twice, and the
    trigger's run had no trigger id (``trigger --wait`` never saw it). Fixed: the waiting
    trigger's id is kept beside the pending tick and handed on with it. (Shrunk first to
    ``operator_triggers`` then ``a_job_never_stays_stuck``; the probe now passes a lease
    first, and nodes drop triggers read that late, so the same steps are written with an
    explicit wake-up.)"""
    state.define_jobs(catchup=ALL_SKIP)
    state.operator_triggers(job="j-queue")
    state.time_passes(grains=3, awake=["a"], replica_syncs=False)
    state.finish(node="a", job="j-queue", ok=True)


def test_a_won_tick_passed_while_undecided_is_decided_late_once(state: Steps) -> None:
    """Not a finding of the model: the rule acquire.lua gained with it (a decision passing
    the tick before its own while that tick's claim is won and undecided notes it, and the
    claim's owner decides it late), driven through the machine so that its invariants
    (one start per tick, fences rising, nothing decided silently) check it. Node a wins a
    tick and is slow to decide; b, which lost that tick, wins and decides the next."""
    machine = state.machine
    state.define_jobs(catchup=dict.fromkeys(ALL_SKIP, Catchup.ALL))
    state.claim(node="a", job="j-allow", late=False)  # a wins the tick that has come
    state.claim(node="b", job="j-allow", late=False)  # b loses it
    tick = machine.head()
    state.time_passes(awake=[], grains=3)  # the next tick
    state.claim(node="b", job="j-allow", late=False)  # b wins it, passing a's
    state.decide(node="b")
    state.decide(node="a")  # a's answer, late: decided now, not stale
    state.time_passes(awake=[], grains=6)  # past the hold of a job's first grants
    started = {t: len(runs) for (job, t), runs in machine.starts.items() if job == "j-allow"}
    assert started == {tick: 1, tick + 1: 1}


def test_garbage_under_a_wiped_jobs_fence_key_still_holds_new_grants(state: Steps) -> None:
    """The deep run's first open finding: a wipe, then garbage under the fence key, then an
    acquire by a node that has seen a fence. The garbled counter was moved aside and
    re-seeded without the hold ("the lease still guards the job"), but the wipe had taken
    the lease: the new run overlapped the one started before the wipe (j-skip tick 1000001
    on a and on b at once). Fixed: a garbled counter with no lease held holds new grants
    for one lease_ttl, as a wipe does."""
    state.define_jobs(catchup=ALL_SKIP)
    state.redis_restarts(keeps_data=False)
    state.decide_but_the_answers_are_lost(node="a", job="j-skip")
    for _ in range(3):
        state.decide(node="a")
    state.redis_restarts(keeps_data=False)
    state.decide_but_the_answers_are_lost(node="b", job="j-skip")
    state.redis_restarts(keeps_data=False)
    state.garbage_lands_under_a_key(job="j-skip", key="fence", kind="text")
    state.decide(node="b")


def test_a_replayed_grant_does_not_start_after_a_newer_fence_was_handed_out(
    state: Steps,
) -> None:
    """The deep run's second finding: a failover to a replica that lagged restored a won
    claim's remembered grant and its lease; the node retrying its lost answer got the old
    grant back and started it, though it had itself seen a fence above it since (here: its
    own later decision, whose answer was lost too). Fixed: a replayed grant starts only
    while neither the job's counter nor the caller knows a fence above it."""
    machine = state.machine
    state.define_jobs(catchup=ALL_SKIP)
    state.decide_but_the_answers_are_lost(node="a", job="j-replace")  # tick 1, fence F1
    state.time_passes(awake=[], grains=1, replica_syncs=True)  # the replica has F1's lease
    state.time_passes(awake=[], grains=2)
    state.decide_but_the_answers_are_lost(node="a", job="j-replace")  # tick 2 replaces: F2
    assert machine.max_fence["j-replace"] > machine.runs[0].fence
    state.failover_to_a_lagging_replica(back=0)  # F1's grant and lease are back
    state.decide(node="a")  # a retries both: F1's grant must not start


def test_a_lagging_failover_does_not_bring_back_a_lease_that_had_expired(state: Steps) -> None:
    """Not a protocol bug: the model restored a lagging replica's keys with the TTLs they
    had when it copied them, as if the replica's clock had stopped. A lease that had
    expired on the primary (and been followed by another node's run) came back alive, and
    the retried grant under it started beside that run. A replica keeps expiries as
    instants (Redis 7 replicates them as PXAT): the model now ages the copies."""
    state.define_jobs(catchup=ALL_SKIP)
    state.decide_but_the_answers_are_lost(node="a", job="j-skip")
    state.time_passes(awake=[], grains=1, replica_syncs=True)
    state.time_passes(awake=["b"], grains=5)  # F1's lease expires; b runs tick 3
    state.failover_to_a_lagging_replica(back=0)
    state.decide(node="a")


def test_a_frozen_winners_claim_is_taken_over_and_its_late_decision_refused(
    state: Steps,
) -> None:
    """Issue 21's known gap: a winner frozen between its claim and its decision took the
    tick with it. A live node now takes the claim over; the winner, thawed, is refused."""
    machine = state.machine
    state.define_jobs(catchup=dict.fromkeys(ALL_SKIP, Catchup.ALL))
    state.claim(node="a", job="j-skip", late=False)
    tick = machine.head()
    state.pause(node="a")
    state.a_dead_winners_claims_are_taken_over(taker="b", victim="a")
    state.resume(node="a", notices_first=True)
    state.decide(node="a")  # first: refused, though no decision has been made yet
    state.decide(node="b")
    state.time_passes(awake=[], grains=6)  # past the hold of a job's first grants
    assert [r.node for r in machine.starts[("j-skip", tick)]] == ["b"]


def test_a_dead_winners_tick_that_a_later_decision_passed_runs_late_once(state: Steps) -> None:
    """A wins tick 1 and freezes; b wins tick 2 and decides it, passing tick 1; c takes
    tick 1 over and runs it late (catchup = all); a, thawed, is refused."""
    machine = state.machine
    state.define_jobs(catchup=dict.fromkeys(ALL_SKIP, Catchup.ALL))
    state.claim(node="a", job="j-allow", late=False)
    state.claim(node="b", job="j-allow", late=False)  # b loses tick 1
    tick = machine.head()
    state.pause(node="a")
    state.time_passes(awake=[], grains=3)
    state.claim(node="b", job="j-allow", late=False)  # b wins tick 2
    state.decide(node="b")
    state.a_dead_winners_claims_are_taken_over(taker="c", victim="a")
    state.decide(node="c")
    state.resume(node="a", notices_first=True)
    state.decide(node="a")
    state.time_passes(awake=[], grains=6)
    started = {t: [r.node for r in runs] for (job, t), runs in machine.starts.items()}
    assert started == {tick: ["c"], tick + 1: ["b"]}


def test_a_crashed_winners_claim_is_taken_over(state: Steps) -> None:
    machine = state.machine
    state.define_jobs(catchup=ALL_SKIP)
    state.claim(node="a", job="j-queue", late=False)
    tick = machine.head()
    state.crash(node="a")
    state.a_dead_winners_claims_are_taken_over(taker="c", victim="a")
    state.decide(node="c")
    state.time_passes(awake=[], grains=6)
    assert [r.node for r in machine.starts[("j-queue", tick)]] == ["c"]


def test_garbage_in_the_run_fence_is_not_reported_as_an_abandoned_run(state: Steps) -> None:
    """Found by the model on PostgreSQL: a job's row edited to run_fence = -1 (no run had
    it) was reported by the next grant as an abandoned run with fence -1, tick -1. Fixed
    (schema version 9): acquire moves a garbled run fence or tick to the quarantine table
    and reports it as garbage, as it does a garbled lease or counter."""
    state.define_jobs(catchup=ALL_SKIP)
    state.garbage_lands_under_a_key(job="j-skip", key="state", kind="text")
    state.a_job_never_stays_stuck(job="j-skip")


def test_a_re_asserted_run_that_dies_is_reported_abandoned(state: Steps) -> None:
    """Found by the model on PostgreSQL, whose renew() makes a re-asserted run the job's
    run again: b runs a tick, Redis (the database) is wiped, b's renewal writes its lease
    back, b crashes; the next grant after that lease expires reports b's run abandoned
    (DESIGN.md section 4). renew.lua wrote the lease back but not the state's run, so on
    Redis the dead run was never reported. Fixed: renew.lua writes the run too (the model
    expects the report on both stores)."""
    machine = state.machine
    state.define_jobs(catchup=ALL_SKIP)
    state.time_passes(awake=["b"], grains=3)
    state.redis_restarts(keeps_data=False, early_end=False)
    state.time_passes(awake=[], grains=2)  # b renews: its lease is re-asserted
    before = len(machine.runs)
    state.crash(node="b")
    state.time_passes(awake=[], grains=6)  # b's lease expires
    state.claim(node="a", job="j-skip", late=False)
    state.decide(node="a")
    assert [r.node for r in machine.runs[before:] if r.job == "j-skip"] == ["a"]


def test_a_wipe_then_a_lagging_failover_is_excused_as_the_failover(state: Steps) -> None:
    """Found by the model on fakeredis (2026-12-07): a runs j-skip's tick and is cut off,
    Redis restarts empty, then a replica that copied the data before the wipe takes over.
    Its copy of a's lease expires at the instant a's older renewal set, before a's own
    deadline, and b's grant overlaps a's run: asynchronous replication lost the renewals,
    the overlap a lossy failover is excused for. The model kept only the first loss that
    took a's lease (the wipe), whose excuse needs a grant by a node with no evidence, and
    b had read the replica's fence counter: it reported a violation. Fixed in the model:
    a run keeps every loss that took its lease."""
    machine = state.machine
    state.define_jobs(catchup=ALL_SKIP)
    state.decide_but_the_answers_are_lost(job="j-skip", node="a")
    state.time_passes(awake=[], grains=1, replica_syncs=False)
    state.time_passes(awake=[], grains=1, replica_syncs=True)
    state.time_passes(awake=["a"], grains=1, replica_syncs=False)
    state.cut_off(node="a")
    state.redis_restarts(early_end=False, keeps_data=False)
    state.failover_to_a_lagging_replica(back=0)
    state.time_passes(awake=["a", "b"], grains=3, replica_syncs=False)
    assert machine.excused["overlap after a lossy failover"] >= 1


def test_a_grant_held_after_a_wipe_confirms_its_lease_even_when_its_hold_ends_at_once(
    state: Steps,
) -> None:
    """b's trigger, granted just after a wipe, holds; c's older grant (held too, behind the
    garbage its lease key had held) re-asserts its lease in the same instant, taking it
    from b's unstarted grant, and every node having re-asserted ends the holds early. The
    runner confirms a held grant's lease whenever it held (runner.py); the model did only
    when its start came later than its grant, so b started in the grant's very
    millisecond without confirming, beside c. Fixed in the model: a held grant is marked
    (``Run.held``) and always confirms (deep model, seed 31)."""
    state.define_jobs(catchup=ALL_SKIP)
    state.garbage_lands_under_a_key(job="j-skip", key="lease", kind="text")
    state.decide_but_the_answers_are_lost(job="j-skip", node="c")
    state.operator_triggers(job="j-skip")
    state.decide(node="c")
    state.decide_but_the_answers_are_lost(job="j-skip", node="b")
    state.redis_restarts(early_end=False, keeps_data=False)
    state.decide(node="b")
    state.every_node_re_asserts_its_leases_after_the_wipe()


def test_a_held_grant_that_starts_after_a_later_grant_of_its_trigger_is_excused_by_the_loss(
    state: Steps,
) -> None:
    """a's grant of j-allow's trigger t1, made after a wipe, holds; meanwhile a failover to
    a replica that copied the data before the trigger's claim lets c win t1 again and run
    it at once; a's run starts when its hold ends, second. A duplicate inside the
    failover's window (README bound), but the model looked for a loss between the earlier
    claim and the grant of the run that started second, which here is the earlier grant.
    Fixed in the model: the loss must fall after the older claim and no later than the
    newer grant, whichever started first (deep model, seed 31)."""
    state.define_jobs(catchup=ALL_SKIP)
    state.garbage_lands_under_a_key(job="j-skip", key="lease", kind="text")
    for _ in range(4):
        state.time_passes(awake=[], grains=1, replica_syncs=False)
    state.time_passes(awake=["a", "b", "c"], grains=5, replica_syncs=True)
    state.operator_triggers(job="j-allow")
    state.redis_restarts(early_end=False, keeps_data=False)
    state.garbage_lands_under_a_key(job="j-skip", key="lease", kind="text")
    state.redis_restarts(early_end=False, keeps_data=True)
    state.every_node_re_asserts_its_leases_after_the_wipe()
    state.time_passes(awake=["a", "b"], grains=1, replica_syncs=False)
    state.time_passes(awake=["a", "b"], grains=2, replica_syncs=False)
    state.failover_to_a_lagging_replica(back=0)
    state.time_passes(awake=["b", "a", "c"], grains=4, replica_syncs=False)
    state.time_passes(awake=[], grains=2, replica_syncs=False)


def test_a_blind_grants_catch_up_continues_as_blind(state: Steps) -> None:
    """a runs j-skip's backlog and is cut off; Redis is wiped; b, which has seen no fence
    of the job, decides its own backlog (1000002-1000003) and runs it beside a's run: the
    README's limit for a node without evidence, excused for b's first run. Its second
    tick, handed on by the release under the same lease with no decision, is as blind,
    but the model did not carry that over and flagged the overlap (deep model, seed 51)."""
    state.define_jobs(catchup={**ALL_SKIP, "j-skip": Catchup.ALL})
    state.time_passes(awake=["a"], grains=3, replica_syncs=False)
    state.cut_off(node="a")
    state.redis_restarts(early_end=False, keeps_data=False)
    state.time_passes(awake=["a", "b"], grains=3, replica_syncs=False)
    state.finish(job="j-skip", node="b", ok=False)


def test_garbage_in_a_lease_then_a_wipe_is_excused_as_the_wipe(state: Steps) -> None:
    """c runs j-skip and is cut off; garbage lands under the job's lease key, then Redis is
    wiped; a, which has seen no fence of the job, decides the next tick and runs it beside
    c's run: the README's limit for a node without evidence after a wipe. The model kept
    only the first loss that took c's lease (the garbage) and excused a blind grant after
    a wipe only. Fixed in the model: any wipe among the losses since c's last renewal
    (deep model, seed 61; the failover's excuse had the same gap, 57fe5ad)."""
    state.define_jobs(catchup=ALL_SKIP)
    state.time_passes(awake=[], grains=2, replica_syncs=False)
    state.time_passes(awake=["c"], grains=1, replica_syncs=False)
    state.cut_off(node="c")
    state.garbage_lands_under_a_key(job="j-skip", key="lease", kind="text")
    state.redis_restarts(early_end=False, keeps_data=False)
    state.time_passes(awake=["a"], grains=3, replica_syncs=False)
