"""What the scheduler model found, each written out as steps of the machine.

Each test replays a failing example of ``tests/model/scheduler.py`` step by step, in the
``state.*`` form hypothesis prints (the witness is checked after every step and the
records are counted at the end, as in the machine), cut down by hand to the steps that
matter. Each failed, as its docstring says, before the fix it names.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from cronrace.model.policies import Catchup, Overlap
from tests.model.scheduler import JobSpec, RacersModel, SchedulerModel

pytestmark = pytest.mark.model


class Steps:
    """Runs machine steps and checks the invariant after each, as hypothesis does."""

    def __init__(self, machine: SchedulerModel) -> None:
        self.machine = machine

    def __getattr__(self, name: str) -> object:
        step = getattr(self.machine, name)

        def run(**kwargs: object) -> None:
            step(**kwargs)
            self.machine.nothing_fires_twice_or_early()

        return run


def _run(machine: SchedulerModel) -> Iterator[Steps]:
    try:
        yield Steps(machine)
        machine.every_tick_is_accounted_for()
    finally:
        machine.failed = True  # checked above; teardown only clears away
        machine.teardown()


@pytest.fixture
def state() -> Iterator[Steps]:
    yield from _run(SchedulerModel())


@pytest.fixture
def racers_state() -> Iterator[Steps]:
    """The fleet with ``racers = 2`` (RacersModel)."""
    yield from _run(RacersModel())


def jobs(
    j1: tuple[Overlap, Catchup, int] = (Overlap.SKIP, Catchup.SKIP, 0),
    j2: tuple[Overlap, Catchup, int] = (Overlap.SKIP, Catchup.SKIP, 0),
) -> tuple[JobSpec, JobSpec]:
    return JobSpec("j1", 10, *j1), JobSpec("j2", 15, *j2)


def test_a_backlog_counts_as_missed_only_the_ticks_nobody_decided(state: Steps) -> None:
    """n2 froze; n1 decided two ticks and froze too, missing the third; n2 woke, won the
    claim on the third and wrote ``missed`` 2 for the two n1 had run (the count of its own
    backlog, not of what nobody decided): 16 ticks fired and 2 missed in a window of 16.
    Fixed: the missed count leaves out ticks at or below the watermark the acquire met
    (decisions.missed_since)."""
    state.define_fleet(jobs=jobs(j1=(Overlap.SKIP, Catchup.LATEST, 0)), nodes=2)
    state.node_freezes(name="n2")
    state.time_passes(seconds=20)
    state.node_freezes(name="n1")
    state.time_passes(seconds=12)
    state.node_thaws(name="n2")


def test_a_trigger_read_after_its_claim_expired_does_not_run_again(state: Steps) -> None:
    """A trigger run by n1 was read by n2 after its claim had expired (n2 frozen for longer
    than the claim lives): n2 won the expired claim and ran the trigger again, 60 s later.
    Fixed: a trigger read more than ``catchup_window`` after its request is dropped with a
    warning (Scheduler.fire_trigger)."""
    state.define_fleet(jobs=jobs(), nodes=2)
    state.node_freezes(name="n2")
    state.operator_triggers(job="j1")
    state.time_passes(seconds=60)
    state.node_thaws(name="n2")


def test_a_graceful_stop_decides_a_claim_whose_answer_was_lost(state: Steps) -> None:
    """The claims of tick 60 were written but their answers lost (n1 won, n2 lost); both
    nodes put the tick back to retry and read back, but were stopped gracefully first:
    n1's loop ended with tick 60 won and undecided, and nothing was recorded. Fixed: a
    stopping tick loop claims again and reads back what got no answer, and decides it
    (Scheduler._decide_unanswered)."""
    state.define_fleet(jobs=jobs(), nodes=2)
    state.time_passes(seconds=4)
    state.redis_becomes_unreachable(kind="answers_lost")
    state.time_passes(seconds=1)
    state.redis_comes_back()
    state.node_stops(name="n1", forced=False)
    state.node_stops(name="n2", forced=False)


def test_a_forced_stop_records_the_queued_tick_handed_to_its_cancelled_run(state: Steps) -> None:
    """A forced stop cancelled the queue_one run of tick 55 while tick 70 waited behind it:
    the cancelled run's release handed the lease on to tick 70, which nobody ran or
    recorded (only its ``queued`` record), and its lease blocked the job. Fixed: a release
    that hands on a tick to a run that will not go on records it ``cancelled`` and releases
    it (Runner._refuse_hand_on)."""
    state.define_fleet(jobs=jobs(j2=(Overlap.QUEUE_ONE, Catchup.SKIP, 35)), nodes=1)
    state.time_passes(seconds=16)
    state.node_stops(name="n1", forced=True)


def test_a_claim_taken_over_decides_the_backlog_its_winner_was_deciding(state: Steps) -> None:
    """Issue 21, the write pause's lost tick: one claim, on the newest due tick, decides a
    job's whole backlog. Here the fleet froze for 25 s; n1 woke first, won the claim on
    tick 80 for the backlog 70, 80 and stalled before deciding it (frozen; in the fault
    test, its decision was held by ``CLIENT PAUSE WRITE`` while its heartbeat looked
    silent). n2 lost that claim, saw n1 go silent, took the claim over and decided tick
    80 alone: the watermark passed 70, which nobody decided (no run, no record). Failed
    before (j1: tick 70 not fired); fixed: a node remembers the oldest tick its own plan
    covered with each claim it lost, and decides from there the claims it takes over
    (TickRace.take_over_claims); ticks others decided are left alone (the watermark)."""
    state.machine.heartbeat_s = 2.0
    state.define_fleet(
        jobs=jobs(j1=(Overlap.SKIP, Catchup.ALL, 0), j2=(Overlap.SKIP, Catchup.ALL, 0)), nodes=2
    )
    state.node_freezes(name="n1")
    state.node_freezes(name="n2")
    state.time_passes(seconds=25)
    state.node_freezes_after_its_next_win(name="n1")
    state.node_thaws(name="n1")
    state.node_thaws(name="n2")
    state.time_passes(seconds=15)


def test_a_claim_won_by_a_node_already_counted_departed_is_not_lost(state: Steps) -> None:
    """Issue 21, a winner already counted departed: n1's heartbeats failed while its claims
    went through, so n2 counted it departed; n1 then won a claim and froze before deciding
    it. Only a new departure made n2 look at the claims it lost, and n1 was not departing
    anew: nobody took the claim over; n2 went on deciding later ticks, and when n1 thawed
    its late decision of the claim ran nothing (its lease had run out). Failed before
    (j2: tick 1700000085 not fired); fixed: a node claims only while its own last heartbeat that
    went through is recent enough that every other node counts it live, or will at its
    next read (``Membership.counted_live``), so a winner's silence after its claim is
    always a new departure."""
    state.machine.heartbeat_s = 2.0
    state.define_fleet(
        jobs=jobs(j1=(Overlap.SKIP, Catchup.ALL, 0), j2=(Overlap.SKIP, Catchup.ALL, 0)), nodes=2
    )
    state.node_heartbeats_fail(name="n1", failing=True)
    state.time_passes(seconds=8)
    state.node_freezes_after_its_next_win(name="n1")
    state.time_passes(seconds=30)
    state.node_heartbeats_fail(name="n1", failing=False)
    state.time_passes(seconds=30)
    # Every tick fired (catchup = "all"), within the takeover's bound: 2.5 heartbeats.
    # The accounting at the end counts the thawed winner's late decision as a record.
    machine = state.machine
    now_s = machine.clock.time()
    for spec in machine.specs.values():
        first = machine.first_decided[spec.name]
        fired = {s.tick_s for s in machine.starts if s.job == spec.name and not s.trigger_id}
        due = range(first + spec.every_s, int(now_s - 2.5 * machine.heartbeat_s), spec.every_s)
        assert not set(due) - fired, f"{spec.name}: not fired {sorted(set(due) - fired)}"


@pytest.mark.parametrize("catchup", list(Catchup))
def test_a_claim_whose_answer_was_lost_is_read_back_before_a_newer_tick_is_claimed(
    state: Steps, catchup: Catchup
) -> None:
    """n1 claimed tick 60 while Redis executed calls but lost their answers, and froze
    before its retry; n2, with answers back, lost that claim (n1's), left 60 to it and
    decided 70, noting 60 passed. n1 thawed with 60 and 70 due and claimed only 70, the
    newest: lost to n2, so its own claim on 60 was never read back, and 60 was neither run
    nor recorded (the scheduler model's saved example, at the timing its retry's jitter
    gave). Failed before under each catch-up policy (j1: tick 1700000060 not fired); fixed:
    a job's next plans claim the tick whose claim got no answer again until it is answered
    (Scheduler._pinned), and a passed tick decided in mode mark is ``missed``, not
    ``stale`` (acquire.lua, PostgreSQL acquire())."""
    state.define_fleet(jobs=jobs(j1=(Overlap.SKIP, catchup, 0)), nodes=2)
    state.redis_becomes_unreachable(kind="answers_lost")
    state.time_passes(seconds=5)
    state.node_freezes(name="n1")
    state.redis_comes_back()
    state.time_passes(seconds=12)
    state.node_thaws(name="n1")


@pytest.mark.parametrize("catchup", list(Catchup))
def test_a_won_tick_whose_decision_never_got_through_is_accounted_for(
    state: Steps, catchup: Catchup
) -> None:
    """n1 won tick 60 and froze before deciding it; Redis went down; n1 thawed and retried
    the acquire until the tick left its catch-up window (100), then dropped it ("it will
    not run") and planned on from 70: the backlog after it was counted missed (4), tick 60
    in nothing. The model with ``racers = 2`` found it (RacersModel, deep profile); it
    needs no racers. Failed before under each catch-up policy (j1: 60 not fired, nor
    counted); fixed: a decision the store never answered leaves its job unanswered
    (TickRace._decide), so the loop plans that tick again as the oldest of the next
    backlog, whose acquire's watermark tells whether it was decided (then the grant that
    never started is reported ``abandoned``) or missed."""
    state.define_fleet(jobs=jobs(j1=(Overlap.SKIP, catchup, 0)), nodes=1)
    state.node_freezes_after_its_next_win(name="n1")
    state.time_passes(seconds=6)
    state.redis_becomes_unreachable(kind="down")
    state.node_thaws(name="n1")
    state.time_passes(seconds=45)


def every_beat_failing_in_turn(*, all_failing_s: int) -> None:
    """racers = 2 of 3: n2's and n3's heartbeats fail, then n1's too while n3's come back,
    then n3's again: for ``all_failing_s`` every node's beats fail, so none claims (a node
    others may count departed claims nothing); then n2's come back first."""
    machine = RacersModel()
    try:
        state = Steps(machine)
        state.define_fleet(jobs=jobs(), nodes=3)
        state.node_heartbeats_fail(name="n2", failing=True)
        state.node_heartbeats_fail(name="n3", failing=True)
        state.time_passes(seconds=47)
        state.time_passes(seconds=37)
        state.node_heartbeats_fail(name="n1", failing=True)
        state.node_heartbeats_fail(name="n3", failing=False)
        state.time_passes(seconds=56)
        state.node_heartbeats_fail(name="n3", failing=True)
        state.time_passes(seconds=all_failing_s)
        state.node_heartbeats_fail(name="n2", failing=False)
        state.time_passes(seconds=30)
        machine.every_tick_is_accounted_for()
    finally:
        machine.failed = True
        machine.teardown()


def test_ticks_nobody_raced_while_every_nodes_beats_failed_are_counted_missed() -> None:
    """racers = 2 of 3: n2's and n3's heartbeats failed, then n1's too while n3's came
    back, then n3's again: for 100 s every node's beats failed, so none claimed (a node
    others may count departed claims nothing). n2's came back first; it saw the other two
    leave only then, with its view's last beats of them minutes old, and raced again the
    ticks they had been left, but only those of the last few heartbeats (the orphan
    window): its decision moved the watermark past the older ones, neither run nor
    counted (j2: 205-280, six ticks). The scheduler model with racers = 2 found it (deep
    profile). Fixed: a change seen late is looked back on from the leavers' last heartbeat
    (RacerShare.recover), so those ticks are counted missed."""
    every_beat_failing_in_turn(all_failing_s=100)


def test_more_ticks_than_the_share_lists_whose_racers_left_unseen_are_all_counted() -> None:
    """As above, with every node's beats failing for 15 minutes: j2 (every 15 s) had 79
    ticks since its racers' last heartbeat when n2 saw them leave, more than
    RacerShare.recover lists (64). The 7 between the oldest listed and the last few
    heartbeats' were neither raced again nor counted (60 not fired, 53 counted missed).
    Fixed: they are counted (RacerShare.unlisted) and recorded missed with the listed
    ones' decision."""
    every_beat_failing_in_turn(all_failing_s=900)


def test_a_backlog_granted_after_its_lease_ran_out_records_every_tick(racers_state: Steps) -> None:
    """A single node (racers = 2) froze, was set to freeze again right after its next win,
    and thawed 30 s later: it claimed j2's backlog (catch-up all: two ticks in one claim)
    and froze before deciding it; the grant's answer came back after its lease had run
    out, so the run did not start. Only the backlog's first tick was recorded
    ``lease_lost``; the second had no record (the scheduler model, seed 41). Fixed: an
    unrun grant covers every tick the run would have (decisions.decide), and each is
    recorded (unrun.release_unrun)."""
    racers_state.define_fleet(jobs=jobs(j2=(Overlap.SKIP, Catchup.ALL, 0)), nodes=1)
    racers_state.node_freezes(name="n1")
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.time_passes(seconds=30)
    racers_state.node_thaws(name="n1")
    racers_state.time_passes(seconds=18)


def test_a_tick_taken_over_from_a_frozen_winner_is_run_or_recorded(racers_state: Steps) -> None:
    """racers = 2 of 3: n1 won j1's tick 60 and froze before deciding it; n2, its other
    racer, took the claim over when n1 went silent, and froze before deciding it too; n3,
    racing j1 since n1 left, saw n2 leave, but n2 had beaten after tick 60, so n3 raced
    only the ticks after that beat, and it had lost no claim of tick 60 to take over. It
    ran tick 70; tick 60 had no run and no record (the scheduler model, deep profile,
    seed 41). Fixed: a tick whose last racers beat after it is raced again while that
    beat is within the orphan window after it (share.RacerShare._members_left), and a
    claim a node looked at in a takeover and did not take is watched keep_s more
    (takeover.Takeovers): another node may have taken it and died."""
    racers_state.define_fleet(jobs=jobs(), nodes=3)
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.time_passes(seconds=15)
    racers_state.node_freezes_after_its_next_win(name="n1")


def test_a_claim_its_taker_held_past_its_lifetime_is_recorded_when_the_taker_thaws(
    racers_state: Steps,
) -> None:
    """racers = 2 of 3: n1 won j1's tick 60 and froze; n2 took the claim over and froze
    before deciding it; n1 thawed (answered stale: n2 held the claim), won tick 70 and
    froze again, for 53 s. n2's claim of 60 ran out meanwhile, so n1's decision of 70
    (its prior tick 60) found no claim and did not leave 60 to its holder; n2, thawed at
    the end, was answered stale, and 60 had no record (the scheduler model, deep profile,
    seed 41, after the chain-of-takeovers fix). Fixed: a prior claim gone while its tick
    is above the watermark is noted passed too (acquire.lua, acquire.sql): n2's decision
    is answered missed."""
    racers_state.define_fleet(jobs=jobs(), nodes=3)
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.time_passes(seconds=12)
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.node_thaws(name="n1")
    racers_state.time_passes(seconds=53)
    racers_state.node_thaws(name="n1")


def test_a_taken_over_backlog_past_the_catch_up_window_is_counted(racers_state: Steps) -> None:
    """racers = 2 of 3: n1 thawed 57 s late and claimed j2's backlog (220 to 265, one
    claim on 265), lost to n3, which froze on it; n1 took the claim over and decided the
    backlog it had covered, but only inside the catch-up window: tick 220, past it, was
    neither raced nor counted (missed 3 of 4; the scheduler model, deep profile, seed 41,
    after the gone-claim fix). Fixed: the ticks past the window are counted missed with
    the others (race.take_over_claims, ``expired``)."""
    racers_state.define_fleet(jobs=jobs(), nodes=3)
    racers_state.time_passes(seconds=35)
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.time_passes(seconds=54)
    racers_state.time_passes(seconds=22)
    racers_state.time_passes(seconds=41)
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.time_passes(seconds=2)
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.time_passes(seconds=57)
    racers_state.node_thaws(name="n3")
    racers_state.node_thaws(name="n1")
    racers_state.time_passes(seconds=30)


@pytest.mark.parametrize("catchup", list(Catchup))
def test_a_late_takers_backlog_is_taken_and_counted_whole(
    racers_state: Steps, catchup: Catchup
) -> None:
    """racers = 2 of 3: n2 claimed j1's backlog 90-150 (one claim on 150) and froze; n3
    took the claim over and froze too; n2, thawed, decided 180 and left 150 and the range
    below it to their claims. n3, thawed at the end, decided 150 late.

    Catch-up skip (mode mark): answered missed, it recorded 150 alone; 90-140 stayed in
    the passed range, with no record (the scheduler model, deep profile, seed 41; it
    predates the session's takeover fixes). Fixed: a late missed answer takes its backlog
    out of the range too (late_from, acquire.lua and SQL), and the decision counts it.

    Catch-up latest or all (mode run; the scheduler model's example with the policies
    varied): j2's taker n3 decided 145 late, its plan covering 85-145 and firing 145 alone
    (latest), or 130 and 145 with 85-115 past the window (all). The script took the
    backlog from the tick its run was for (145, or 130), so 85-130 (85-115) stayed in the
    range, neither run nor counted. Fixed: the request names the oldest tick the plan
    covers (first_tick), the script takes the backlog from there, and the decision counts
    the ticks it took and does not fire missed."""
    racers_state.define_fleet(
        jobs=jobs(j1=(Overlap.SKIP, catchup, 0), j2=(Overlap.SKIP, catchup, 0)), nodes=3
    )
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.time_passes(seconds=18)
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.time_passes(seconds=50)
    racers_state.time_passes(seconds=28)
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.node_thaws(name="n2")
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.node_thaws(name="n3")
    racers_state.time_passes(seconds=38)
    racers_state.node_thaws(name="n2")


@pytest.mark.parametrize("frozen_s", [46, 90])
def test_a_late_mark_whose_answer_was_lost_is_read_back_and_recorded(
    racers_state: Steps, frozen_s: int
) -> None:
    """racers = 2 of 3: n1 won j1's tick 60 and froze, n2 and n3 took its claim over in
    turn and froze too. n3 thawed past the tick's catch-up window (at 101 s; 145 s) and decided
    it in mode mark (it runs nothing); the store marked it, but the answer was lost, and
    n3 gave it up at once, the window being over already. The missed record the answer
    called for was written by no one, and the next decision found 60 decided (the
    scheduler model with racers = 2; its tick 60 neither fired nor counted). Fixed: a
    mark's answer is kept a claim's lifetime from the decision (keep_ms: the claim is
    kept, or made anew when it had run out, as after 90 s frozen), and the decision is
    sent again that long after its first failure (acquire_retrying)."""
    racers_state.define_fleet(jobs=jobs(), nodes=3)
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.time_passes(seconds=frozen_s)
    racers_state.redis_becomes_unreachable(kind="answers_lost")
    racers_state.node_thaws(name="n3")


def test_a_trigger_claimed_after_its_claim_ran_out_does_not_run_again(
    racers_state: Steps,
) -> None:
    """racers = 2 of 3: triggers of j1 were asked while nodes were frozen after wins.
    Thawed, n1 ran one at 122 s; n2's claim of the same trigger went out only at 180 s,
    past that claim's lifetime (42 s): it won the claim anew and ran the trigger a second
    time (the scheduler model, deep profile, seed 41: n3 and n2, 84 s apart; the age
    check when a trigger is read cannot see a pause after it). Fixed: the store keeps the
    job's last 16 triggers decided and answers one among them stale (acquire.lua's
    state.triggers, PostgreSQL's jobs.triggers)."""
    racers_state.define_fleet(jobs=jobs(), nodes=3)
    racers_state.node_freezes_after_its_next_win(name="n1")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.time_passes(seconds=14)
    racers_state.operator_triggers(job="j1")
    racers_state.node_freezes_after_its_next_win(name="n3")
    racers_state.node_freezes_after_its_next_win(name="n2")
    racers_state.time_passes(seconds=53)
    racers_state.operator_triggers(job="j1")
    racers_state.operator_triggers(job="j1")
    racers_state.node_thaws(name="n2")
    racers_state.node_thaws(name="n1")
    racers_state.time_passes(seconds=58)


def test_a_tick_whose_decision_was_given_up_is_claimed_again_and_read_back(
    racers_state: Steps,
) -> None:
    """racers = 2 of 3: Redis went down while n1 and n2 were frozen after wins; thawed, a
    node's decision of a won tick of j1 got no answer until the tick left its catch-up
    window, and was given up. The loop planned the job again as a backlog from that tick,
    but another racer won the backlog's claim, and its plan began after the tick (left to
    this node): nobody decided it (the scheduler model, deep profile, seed 41; the backoff
    jitter decides which node, so the test seeds it). Fixed: a decision given up leaves
    its claim unanswered, so the loop pins the job to it and claims it again, read back
    (TickRace._decide)."""
    saved = random.getstate()
    random.seed(2)
    try:
        racers_state.define_fleet(jobs=jobs(), nodes=3)
        racers_state.node_freezes_after_its_next_win(name="n1")
        racers_state.time_passes(seconds=13)
        racers_state.node_freezes_after_its_next_win(name="n2")
        racers_state.time_passes(seconds=14)
        racers_state.redis_becomes_unreachable(kind="down")
        racers_state.time_passes(seconds=23)
        racers_state.node_thaws(name="n1")
        racers_state.node_thaws(name="n2")
        racers_state.time_passes(seconds=44)
        racers_state.time_passes(seconds=53)
    finally:
        random.setstate(saved)


def test_a_run_decided_by_a_node_thawed_at_its_window_end_is_read_back(state: Steps) -> None:
    """Two nodes, racers = all: n2 won j1's tick 120 and froze before deciding it; n1
    decided 130 and noted 120 passed. n2, thawed at 160 (the tick's window end), sent its
    decision (mode run, planned in time): the store answered it missed, late, but the
    answer was lost, and n2 gave it up at once, its window being over. Claimed again and
    read back, the claim held that decision, so it counted lost, and the missed record was
    written by no one (the scheduler model, deep profile, seed 7). Fixed: every decision
    asks its answer kept a second less than its claim lives (a late one extends the
    claim), and one whose first failure comes past its window is sent again that long."""
    state.define_fleet(jobs=jobs(), nodes=2)
    state.node_freezes_after_its_next_win(name="n2")
    state.time_passes(seconds=1)
    state.time_passes(seconds=44)
    state.time_passes(seconds=60)
    state.redis_becomes_unreachable(kind="answers_lost")
    state.node_thaws(name="n2")


def test_a_frozen_winners_claim_passed_by_a_takers_decision_is_left_to_it(
    racers_state: Steps,
) -> None:
    """racers = 2 of 3: n3 won j2's tick 85 and froze; n2, thawed, took over another
    frozen winner's claim of 100 and decided it (a mark): knowing no tick before it (a
    taker's decision names none), it noted nothing passed, and moved the watermark past
    85. n3, thawed, was answered stale for 85: neither run nor counted (the scheduler
    model, deep profile, seed 41, after the session's other fixes; the backoff jitter
    decides which node, so the test seeds it). Fixed: a decision that knows no tick
    before its own notes every tick from the watermark to the oldest it covers as
    passed, left to whoever holds its claim (acquire.lua, PostgreSQL acquire())."""
    saved = random.getstate()
    random.seed(1)
    try:
        racers_state.define_fleet(jobs=jobs(), nodes=3)
        racers_state.node_freezes_after_its_next_win(name="n1")
        racers_state.time_passes(seconds=19)
        racers_state.node_freezes_after_its_next_win(name="n3")
        racers_state.node_freezes_after_its_next_win(name="n2")
        racers_state.node_thaws(name="n1")
        racers_state.node_freezes_after_its_next_win(name="n1")
        racers_state.time_passes(seconds=30)
        racers_state.node_thaws(name="n2")
        racers_state.time_passes(seconds=57)
    finally:
        random.setstate(saved)
