"""Sending decisions: one batch per wake-up, retried while the store is away.

A decision is idempotent for its owner and tick: the store keeps its answer under the won
claim (``claim_ttl``), so a decision whose answer was lost is simply sent again, and a
call that had run answers what it decided (``replayed``), never a second fence. One that
keeps failing is given up at its deadline without loss: if it had been made, its records
are in the store; if not, its ticks are still above the cursor, and the job's next
decision, on whichever node, covers them (docs/design.md section 3).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from cronrace.errors import CronraceError, JobBusyError, StoreUnavailableError
from cronrace.protocol import DecideReply, DecideRequest
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import SetReady
from cronrace.runtime.retry import BACKOFF, Backoff, Retry
from cronrace.stores.contract import Store

log = logging.getLogger("cronrace.tick.loop")

#: One decision: the reply (or the error that ended its attempts) and when the attempt
#: that answered was sent (a grant's lease counts from then, on the monotonic clock).
Answer = tuple[DecideReply | Exception, float]


async def decide_retrying(
    store: Store,
    clock: Clock,
    requests: Sequence[DecideRequest],
    give_up_at_s: Sequence[float],
    *,
    observer: Observer,
    set_ready: SetReady,
    backoff: Backoff = BACKOFF,
    settle: Callable[[list[int], list[Answer]], None],
    hand_off: Callable[[list[int]], None] | None = None,
    wait_first: bool = False,
) -> None:
    """Decide every request; retry those the store did not answer, each until its deadline.

    A request answered is settled at once (``settle``, synchronous), not held until the
    others are: one job whose decisions keep failing (its row locked, its slot moving) must
    not hold back the runs of every job decided with it.

    Args:
        store: where the decisions are made.
        clock: the agent's clock.
        requests: one per won claim, sent together at each attempt.
        give_up_at_s: per request, the shared-clock time after which it is not sent again.
        observer: told about every failed attempt.
        set_ready: readiness follows whether the store answers.
        backoff: the waits between attempts.
        settle: called after each attempt with the indexes whose answers became final
            and the answers so far.
        hand_off: takes the indexes whose job was busy (:class:`JobBusyError`) to retry
            them apart; without it they are retried here.
        wait_first: back off before the first attempt (requests handed off).
    """
    first_sent = clock.monotonic()
    answers: list[Answer] = [(StoreUnavailableError("not sent"), first_sent)] * len(requests)
    todo = list(range(len(requests)))
    attempts = Retry(clock, backoff)
    if wait_first:
        await attempts.wait()
    while True:
        attempt = attempts.attempt
        sent = clock.monotonic()
        replies: list[DecideReply | Exception]
        try:
            replies = list(await store.decide([requests[i] for i in todo]))
        except CronraceError as exc:
            replies = [exc] * len(todo)
        retry = []
        for index, reply in zip(todo, replies, strict=True):
            # A replayed grant not renewed by this attempt was made by an earlier one.
            lapsed = isinstance(reply, DecideReply) and reply.replayed and not reply.renewed
            answers[index] = (reply, first_sent if lapsed else sent)
            if isinstance(reply, StoreUnavailableError):
                retry.append(index)
            elif isinstance(reply, Exception):
                log.error(
                    "decision failed; the job's next decision covers its ticks",
                    extra={
                        "job": requests[index].job,
                        "tick": requests[index].tick_s,
                        "error": str(reply),
                    },
                )
            elif attempt:
                log.warning(
                    "decision answered on retry",
                    extra={
                        "job": requests[index].job,
                        "tick": requests[index].tick_s,
                        "attempt": attempt,
                        "replayed": reply.replayed,
                    },
                )
        if retry:
            observer.redis_error("decide")
        # A slot moving between shards (a live resharding) is no outage.
        outage = any(not isinstance(answers[i][0], JobBusyError) for i in retry)
        now_s = clock.time()
        sent_now = todo
        todo = [index for index in retry if now_s < give_up_at_s[index]]
        busy = [i for i in todo if isinstance(answers[i][0], JobBusyError)]
        if hand_off is not None and busy:
            log.warning(
                "a decision met its job busy (a row locked, a slot moving); retrying it apart",
                extra={"jobs": [requests[i].job for i in busy], "error": str(answers[busy[0]][0])},
            )
            hand_off(busy)
            todo = [index for index in todo if index not in busy]
            sent_now = [index for index in sent_now if index not in busy]
        settle([index for index in sent_now if index not in todo], answers)
        for index in sorted(set(retry) - set(todo) - set(busy)):
            log.error(
                "a decision kept failing until its deadline; the job's next decision covers "
                "its ticks",
                extra={
                    "job": requests[index].job,
                    "tick": requests[index].tick_s,
                    "attempts": attempt + 1,
                },
            )
        why = f"decisions failed: {answers[retry[0]][0]}" if retry else None
        if not todo:
            set_ready(not outage, why=why, source="decisions")
            return
        if outage:
            set_ready(False, why=why, source="decisions")
        log.log(
            logging.WARNING if outage else logging.INFO,
            "decisions failed after winning claims; retrying",
            extra={
                "jobs": [requests[i].job for i in todo],
                "attempt": attempt + 1,
                "error": str(answers[todo[0]][0]),
            },
        )
        await attempts.wait()
