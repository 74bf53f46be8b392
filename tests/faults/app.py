"""The agent run as a real process by the fault tests (``cronrace run tests.faults.app:agent``).

Every handler writes one JSON object per event (start, end, or cancelled, with the wall
time) to the witness: ``RPUSH $FAULT_WITNESS_KEY`` on the redis-server at
``$FAULT_WITNESS_URL`` (tests/faults/witness.py), which no fault touches. Without a witness
the lines go to ``$FAULT_LOG`` (O_APPEND: lines from several processes never interleave).

The write is synchronous on purpose: a handler being cancelled must still get its
"cancelled" line out, and an ``await`` inside a cancelled scope would be cancelled too.
"""

from __future__ import annotations

import os
import time

import anyio
import orjson
import redis

from cronrace import Agent, RunContext

LOG = os.environ.get("FAULT_LOG", "/dev/null")
WITNESS_URL = os.environ.get("FAULT_WITNESS_URL")
WITNESS_KEY = os.environ.get("FAULT_WITNESS_KEY", "witness")
_witness = redis.Redis.from_url(WITNESS_URL, socket_timeout=2) if WITNESS_URL else None
SLOW_S = float(os.environ.get("FAULT_SLOW_S", "3"))
SLOW_LEASE_S = float(os.environ.get("FAULT_SLOW_LEASE_S", "0.9"))
SLOW_CATCHUP = os.environ.get("FAULT_SLOW_CATCHUP", "latest")
SLOW_OVERLAP = os.environ.get("FAULT_SLOW_OVERLAP", "skip")
#: How many more 1-second jobs to define (``extra000``, ``extra001``, ...), and their
#: policies: the cluster test spreads them over every shard. ``queue_one``: a tick that
#: comes while a catch-up of the same job still runs waits for it instead of being skipped.
EXTRA_JOBS = int(os.environ.get("FAULT_EXTRA_JOBS", "0"))
EXTRA_CATCHUP = os.environ.get("FAULT_EXTRA_CATCHUP", "all")
EXTRA_OVERLAP = os.environ.get("FAULT_EXTRA_OVERLAP", "queue_one")
EXTRA_LEASE_S = float(os.environ.get("FAULT_EXTRA_LEASE_S", "0.9"))
#: The extra jobs' catch-up window, seconds (unset: the default).
EXTRA_CATCHUP_WINDOW = os.environ.get("FAULT_EXTRA_CATCHUP_WINDOW")
#: The extra jobs' schedule (default every second): a period longer than
#: ``undecided_claim_s`` has a lost tick claimed again by the node second in line.
EXTRA_SCHEDULE = os.environ.get("FAULT_EXTRA_SCHEDULE", "* * * * * *")

#: Which jobs from code this process defines (default both); "" for none, when a test
#: runs only stored schedules.
CODE_JOBS = os.environ.get("FAULT_CODE_JOBS", "fast,slow").split(",")
#: When set, a job "drifting" with this schedule: nodes started with different values
#: define one job differently (the definition-drift test).
DRIFT_SCHEDULE = os.environ.get("FAULT_DRIFT_SCHEDULE")
#: When set, a job "held": a 0.3 s run under a lease this long. A run that finishes while
#: Redis is away must get its lease released when Redis returns, or the job stays blocked.
HELD_LEASE_S = os.environ.get("FAULT_HELD_LEASE_S")

agent = Agent()


def note(event: str, ctx: RunContext) -> None:
    line = orjson.dumps(
        {
            "event": event,
            "job": ctx.job,
            "tick": ctx.tick_s,
            "node": ctx.node_id,
            "fence": ctx.fence,
            "wall": time.time(),
        }
    )
    if _witness is not None:
        _witness.rpush(WITNESS_KEY, line)
        return
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)


async def fast(ctx: RunContext) -> None:
    note("start", ctx)
    note("end", ctx)


async def slow(ctx: RunContext) -> None:
    note("start", ctx)
    try:
        for _ in range(int(SLOW_S * 10)):  # work in steps: each step is a checkpoint
            await anyio.sleep(0.1)
    except anyio.get_cancelled_exc_class():
        note("cancelled", ctx)
        raise
    note("end", ctx)


async def held(ctx: RunContext) -> None:
    note("start", ctx)
    await anyio.sleep(0.3)
    note("end", ctx)


if "fast" in CODE_JOBS:
    agent.add_job(fast, "* * * * * *", name="fast", lease_ttl=0.9)
if "slow" in CODE_JOBS:
    agent.add_job(
        slow,
        "* * * * * *",
        name="slow",
        lease_ttl=SLOW_LEASE_S,
        catchup=SLOW_CATCHUP,
        overlap=SLOW_OVERLAP,
    )
if DRIFT_SCHEDULE:
    agent.add_job(fast, DRIFT_SCHEDULE, name="drifting", lease_ttl=0.9)
# Stored schedules name this handler (cronrace schedules add NAME SCHEDULE --handler note).
agent.add_handler("note", fast)
if HELD_LEASE_S:
    agent.add_job(held, "* * * * * *", name="held", lease_ttl=float(HELD_LEASE_S))


async def extra(ctx: RunContext) -> None:
    note("start", ctx)
    note("end", ctx)


for _index in range(EXTRA_JOBS):
    agent.add_job(
        extra,
        EXTRA_SCHEDULE,
        name=f"extra{_index:03d}",
        lease_ttl=EXTRA_LEASE_S,
        catchup=EXTRA_CATCHUP,
        overlap=EXTRA_OVERLAP,
        **({} if EXTRA_CATCHUP_WINDOW is None else {"catchup_window": float(EXTRA_CATCHUP_WINDOW)}),
    )


#: When set (to a job name), this process stops itself (SIGSTOP) between winning a claim of
#: that job and deciding it, once, after the file ``$FAULT_FREEZE_ARM`` appears; it writes
#: the tick to ``$FAULT_FREEZE_MARK`` first. The test then kills it, or lets it go on
#: (SIGCONT) to send its late decision: the window between a claim and its decision, made
#: reproducible (tests/faults/test_dead_winner.py).
FREEZE_JOB = os.environ.get("FAULT_FREEZE_AFTER_CLAIM")

if FREEZE_JOB:
    import signal
    from typing import Any

    from cronrace.tick import race as _race

    _decide = _race.TickRace._decide

    async def _decide_frozen(self: Any, winners: Any, runs: Any, **options: Any) -> Any:
        arm = os.environ["FAULT_FREEZE_ARM"]
        won = [p.plan.tick_s for p in winners if p.job.name == FREEZE_JOB and p.trigger_id is None]
        if won and os.path.exists(arm):  # noqa: ASYNC240 (the point is to block: a freeze)
            os.unlink(arm)
            fd = os.open(os.environ["FAULT_FREEZE_MARK"], os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, f"{won[0]} {time.time()} {os.getpid()}".encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGSTOP)
        return await _decide(self, winners, runs, **options)

    _race.TickRace._decide = _decide_frozen  # type: ignore[method-assign]


#: When set (to the path of the frozen winner's ``$FAULT_FREEZE_MARK``), this process stops
#: itself (SIGSTOP) once, about to decide the tick written there for the job
#: ``$FAULT_FREEZE_TAKEN_JOB``: the first node that wins that tick's claim again after the
#: frozen winner's ran out (the recheck of the node second in line) freezes in turn, before
#: deciding it. It creates ``$FAULT_FREEZE_TAKEN_MARK`` with its pid first; a node that
#: finds it there goes on, and so does the frozen winner (its pid is the mark's third
#: field). tests/faults/test_dead_winner.py: the re-claimer dies too.
FREEZE_TAKEN_FROM = os.environ.get("FAULT_FREEZE_TAKEN_FROM")

if FREEZE_TAKEN_FROM:
    import signal
    from typing import Any

    from cronrace.tick import race as _race

    _decide_taken = _race.TickRace._decide
    _taken_job = os.environ["FAULT_FREEZE_TAKEN_JOB"]
    _taken_frozen = False

    async def _decide_taken_frozen(self: Any, winners: Any, runs: Any, **options: Any) -> Any:
        global _taken_frozen
        try:
            with open(FREEZE_TAKEN_FROM) as mark:  # noqa: ASYNC230 (the point is to block)
                tick_text, _at, pid_text = mark.read().split()
            frozen_tick = int(tick_text) if int(pid_text) != os.getpid() else None
        except (FileNotFoundError, ValueError):
            frozen_tick = None
        won = [p.plan.tick_s for p in winners if p.job.name == _taken_job and p.trigger_id is None]
        if not _taken_frozen and frozen_tick is not None and frozen_tick in won:
            _taken_frozen = True
            try:  # the first taker only: the next one must decide it
                fd = os.open(
                    os.environ["FAULT_FREEZE_TAKEN_MARK"], os.O_WRONLY | os.O_CREAT | os.O_EXCL
                )
            except FileExistsError:
                fd = None
            if fd is not None:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGSTOP)
        return await _decide_taken(self, winners, runs, **options)

    _race.TickRace._decide = _decide_taken_frozen  # type: ignore[method-assign]


#: When set (to a file's path), this process's heartbeats fail while that file exists,
#: and its claims and decisions go through: the others count it departed (on the dense
#: cursor it still claims meanwhile). tests/faults/test_late_departures.py.
BEATS_FAIL_FILE = os.environ.get("FAULT_BEATS_FAIL_FILE")

if BEATS_FAIL_FILE:
    from typing import Any

    from cronrace.errors import RedisUnavailableError
    from cronrace.stores.redis.members import MemberCommands

    _heartbeat = MemberCommands.heartbeat

    async def _heartbeat_unless_failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        if os.path.exists(BEATS_FAIL_FILE):  # noqa: ASYNC240 (a stat per beat)
            raise RedisUnavailableError("heartbeat refused (the fault test's)")
        return await _heartbeat(self, *args, **kwargs)

    MemberCommands.heartbeat = _heartbeat_unless_failing  # type: ignore[method-assign]


#: When set (to a file's path), the first claims sent while that file exists that include
#: the job it names get no answer (and the file goes): the late race of a departure's
#: orphaned ticks, unanswered. tests/faults/test_late_departures.py.
CLAIMS_FAIL_FILE = os.environ.get("FAULT_CLAIMS_FAIL_FILE")

if CLAIMS_FAIL_FILE:
    from typing import Any

    from cronrace.errors import RedisUnavailableError
    from cronrace.stores.redis.commands import Store as _RedisStore

    _claim_each = _RedisStore.claim_each

    async def _claim_each_or_refuse(self: Any, claims: Any, owner: Any, **kwargs: Any) -> Any:
        try:
            with open(CLAIMS_FAIL_FILE) as named:  # noqa: ASYNC230 (a stat and a read)
                job = named.read().strip()
        except FileNotFoundError:
            job = None
        if job is not None and any(c.job == job for c in claims):
            os.unlink(CLAIMS_FAIL_FILE)
            raise RedisUnavailableError("claims refused (the fault test's)")
        return await _claim_each(self, claims, owner, **kwargs)

    _RedisStore.claim_each = _claim_each_or_refuse  # type: ignore[method-assign]
