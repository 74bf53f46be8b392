"""Deciding won claims: ``acquire.lua`` for each, retried while Redis is away.

A claim won is a tick this node must decide. When the acquire's answer is lost (the
connection dropped after the script ran, Redis restarted, it was still loading its data)
the tick would be lost with it, although Redis may be back a second later. Acquire is
idempotent for its owner and tick (the script remembers its answer under the won claim),
so the same request is simply sent again: a call that had run answers what it decided
(``replayed``), never a second fence and never ``stale`` for its own grant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from cronrace.errors import CronraceError, JobBusyError, RedisUnavailableError
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import SetReady
from cronrace.runtime.retry import BACKOFF, Backoff, Retry
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireReply, AcquireRequest

log = logging.getLogger("cronrace.tick.loop")

#: One decision: the reply (or the error that ended its attempts) and the grant time.
Answer = tuple[AcquireReply | Exception, float]


async def acquire_retrying(
    store: Store,
    clock: Clock,
    requests: Sequence[AcquireRequest],
    give_up_at_s: Sequence[float],
    *,
    observer: Observer,
    set_ready: SetReady,
    backoff: Backoff = BACKOFF,
    settle: Callable[[list[int], list[Answer]], None] | None = None,
    hand_off: Callable[[list[int]], None] | None = None,
    wait_first: bool = False,
) -> list[Answer]:
    """Decide every request; retry those Redis did not answer, each until its deadline.

    A request answered is settled at once (``settle``), not held until the others are:
    one job whose decisions keep failing (its row locked by another session, its slot
    moving) must not hold back the runs of every job decided with it.

    Args:
        store: where the scripts run.
        clock: the agent's clock (backoff sleeps; ``time()`` is compared with deadlines).
        requests: one per won claim, all sent in one pipeline per attempt.
        give_up_at_s: per request, the shared-clock time after which it is not sent
            again: its tick's catch-up window ends there, and the claim holding the
            remembered answer outlives it. A request that keeps its answer (``keep_ms``)
            and failed first past that window (decided late) is sent again until
            ``keep_ms`` after that failure: the answer, if one was lost, was remembered
            before then (:func:`retry_deadline_s`).
        observer: told about every failed attempt.
        set_ready: readiness follows whether the store answers.
        backoff: the waits between attempts (default the project's one policy).
        settle: called after each attempt with the indexes whose answers became final
            there (not retried any more) and the answers so far; synchronous, so that
            whatever it registers is registered before anything else awaits.
        hand_off: takes the indexes whose job was busy (:class:`JobBusyError`: a row
            locked, a slot moving) to retry them apart, so that the caller's loop goes on
            with every other job meanwhile; without it they are retried here.
        wait_first: the requests failed just before (handed off): back off first.

    Returns:
        Per request, its reply (or error) and the monotonic time its lease counts from:
        when the attempt that answered was sent, or, for a replayed grant whose lease was
        not renewed by that attempt, when the first was (any of them may have made it).
    """
    first_sent = clock.monotonic()
    answers: list[Answer] = [(RedisUnavailableError("not sent"), first_sent)] * len(requests)
    deadlines_s = list(give_up_at_s)
    failed = [False] * len(requests)
    todo = list(range(len(requests)))
    attempts = Retry(clock, backoff)
    if wait_first:
        await attempts.wait()
    while True:
        attempt = attempts.attempt
        sent = clock.monotonic()
        replies: list[AcquireReply | Exception]
        try:
            replies = list(await store.acquire([requests[i] for i in todo]))
        except CronraceError as exc:
            replies = [exc] * len(todo)
        retry = []
        for index, reply in zip(todo, replies, strict=True):
            # A replayed grant was made by one of the attempts, unless this one renewed it.
            lapsed = isinstance(reply, AcquireReply) and reply.replayed and not reply.renewed
            answers[index] = (reply, first_sent if lapsed else sent)
            _log_answer(requests[index], reply, attempt)
            if isinstance(reply, RedisUnavailableError):
                retry.append(index)
        if retry:
            observer.redis_error("acquire")
        # A slot moving between shards (a live resharding) is no outage: the cluster is
        # healthy and the decision passes once the slot has moved.
        outage = any(not isinstance(answers[i][0], JobBusyError) for i in retry)
        now_s = clock.time()
        for index in retry:
            if not failed[index]:
                failed[index] = True
                deadlines_s[index] = retry_deadline_s(requests[index], deadlines_s[index], now_s)
        sent_now = todo
        todo = [index for index in retry if now_s < deadlines_s[index]]
        gave_up = sorted(set(retry) - set(todo))
        busy = [i for i in todo if isinstance(answers[i][0], JobBusyError)]
        if hand_off is not None and busy:
            log.warning(
                "acquire met a job busy (a row locked, a slot moving); retrying it apart",
                extra={
                    "jobs": [requests[i].job for i in busy],
                    "error": str(answers[busy[0]][0]),
                },
            )
            hand_off(busy)
            todo = [index for index in todo if index not in busy]
            sent_now = [index for index in sent_now if index not in busy]
        if settle is not None:
            settle([index for index in sent_now if index not in todo], answers)
        for index in gave_up:  # not those handed off: they are retried apart
            log.error(
                "acquire kept failing until its deadline (the tick's catch-up window, or "
                "as long as its answer is kept); it will not run",
                extra={
                    "job": requests[index].job,
                    "tick": requests[index].decide_tick_s,
                    "attempts": attempt + 1,
                },
            )
        why = f"decisions failed: {answers[retry[0]][0]}" if retry else None
        if not todo:
            set_ready(not outage, why=why, source="decisions")
            return answers
        if outage:
            set_ready(False, why=why, source="decisions")
        log.log(
            logging.WARNING if outage else logging.INFO,
            "acquire failed after winning claims; retrying"
            if outage
            else "acquire met a job busy (a row locked, a slot moving); retrying",
            extra={
                "jobs": [requests[i].job for i in todo],
                "attempt": attempt + 1,
                "error": str(answers[todo[0]][0]),
            },
        )
        await attempts.wait()


def retry_deadline_s(request: AcquireRequest, give_up_at_s: float, failed_s: float) -> float:
    """Until when a request that failed first at ``failed_s`` is sent again.

    A request that keeps its answer ``keep_ms`` and failed first past its catch-up window
    (a plan that runs nothing, decided past it; a run's decision sent late, by a node
    frozen since its win) is sent again that long after that failure, less a margin. An
    attempt that ran had its answer remembered a moment before its failure was seen (the
    lost answer's way back), and one that ran later, later still. Counted from the send
    instead, a node frozen between reading its clock and sending (the scheduler model's
    freeze) would give up before its answer was even remembered. Given up at once before,
    the records the answer called for were written by no one (the scheduler model: a node
    thawed past a tick's window, and the connection dropped). One that failed in time is
    given up with the window, as before: a run never starts past it.
    """
    if request.keep_ms <= 0 or failed_s < give_up_at_s:
        return give_up_at_s  # failed in time: a run is never started past its window
    keep_s = request.keep_ms / 1000
    return max(give_up_at_s, failed_s + keep_s - min(1.0, keep_s / 4))


def _log_answer(request: AcquireRequest, reply: AcquireReply | Exception, attempt: int) -> None:
    if isinstance(reply, AcquireReply) and not reply.data_lost and not attempt:
        return  # the common case: nothing to say
    context = {"job": request.job, "tick": request.decide_tick_s}
    if isinstance(reply, RedisUnavailableError):
        return
    if isinstance(reply, Exception):
        log.error("acquire failed; this tick will not run", extra={**context, "error": str(reply)})
        return
    if reply.data_lost:
        log.critical(
            "Redis lost this job's data (its fence counter is gone, or behind a fence this "
            "node has seen): new runs of the job wait one lease_ttl, as runs started before "
            "may still be alive",
            extra={**context, "hold_ms": reply.hold_ms, "fence": reply.fence},
        )
    if attempt:
        log.warning(
            "acquire answered on retry",
            extra={**context, "attempt": attempt, "replayed": reply.replayed},
        )
