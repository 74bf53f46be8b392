"""A decision whose answer was lost is sent again while the store keeps that answer.

A plan that runs nothing (mode ``mark``) is decided past its tick's catch-up window, and
so is a run's decision sent by a node frozen since its win: the window gave them no
retry. A node thawed late whose answer was lost gave the tick up, although the store had
decided it, and the records the answer called for were written by no one (the scheduler
model). The answer is kept ``keep_ms`` from the decision, and a decision whose first
failure comes past its window is sent again that long after it. One that failed in time
is still given up when its tick leaves the window.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from cronrace.errors import RedisUnavailableError
from cronrace.model.policies import Overlap
from cronrace.runtime.observer import Observer
from cronrace.runtime.retry import Backoff
from cronrace.stores.values import (
    AcquireDecision,
    AcquireMode,
    AcquireReply,
    AcquireRequest,
    Owner,
)
from cronrace.testing import FakeClock
from cronrace.tick.acquire import Answer, acquire_retrying, retry_deadline_s

OWNER = Owner("n1", "x")
START_S = 1_000.0
#: The tick's catch-up window ended before the decision was sent.
WINDOW_END_S = START_S - 5
KEEP_MS = 20_000


def request(mode: AcquireMode, keep_ms: int) -> AcquireRequest:
    return AcquireRequest(
        "j", 900, 900, 900, OWNER, 5000, Overlap.SKIP, mode, None, keep_ms=keep_ms
    )


class LosingStore:
    """Loses every answer until ``answers_from_s``, then answers ``marked``."""

    def __init__(self, clock: FakeClock, answers_from_s: float) -> None:
        self.clock = clock
        self.answers_from_s = answers_from_s
        self.sent_at: list[float] = []

    async def acquire(self, requests: Sequence[AcquireRequest]) -> list[AcquireReply | Exception]:
        self.sent_at.append(self.clock.time())
        if self.clock.time() < self.answers_from_s:
            return [RedisUnavailableError("the answer was lost on the way")] * len(requests)
        return [AcquireReply(AcquireDecision.MARKED, 0, 899, 0, None, 0, 0, None, (), 0)] * len(
            requests
        )


async def decide(req: AcquireRequest, answers_from_s: float) -> tuple[Answer, LosingStore]:
    clock = FakeClock(START_S)
    store = LosingStore(clock, answers_from_s)
    out: list[Answer] = []

    async def run() -> None:
        out.extend(
            await acquire_retrying(
                store,  # type: ignore[arg-type]
                clock,
                [req],
                [WINDOW_END_S],
                observer=Observer(),
                set_ready=lambda *_, **__: None,
                backoff=Backoff(0.5, 2.0, jitter=False),
            )
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        while not out:
            await clock.advance(0.5)
    return out[0], store


async def test_a_mark_whose_answer_was_lost_is_read_back_while_its_answer_is_kept() -> None:
    (reply, _), store = await decide(request(AcquireMode.MARK, KEEP_MS), START_S + 12)
    assert isinstance(reply, AcquireReply)
    assert reply.decision is AcquireDecision.MARKED
    assert store.sent_at[0] == START_S
    assert len(store.sent_at) > 2


async def test_a_mark_is_given_up_once_its_answer_is_no_longer_kept() -> None:
    (reply, _), store = await decide(request(AcquireMode.MARK, KEEP_MS), START_S + 60)
    assert isinstance(reply, RedisUnavailableError)
    # Sent again until keep_ms after the first failure less a margin for the trip (the
    # last one after its backoff), never once the answer is dropped.
    assert START_S + 17 <= store.sent_at[-1] < START_S + KEEP_MS / 1000


async def test_a_run_past_its_window_is_not_sent_again() -> None:
    (reply, _), store = await decide(request(AcquireMode.RUN, 0), START_S + 12)
    assert isinstance(reply, RedisUnavailableError)
    assert store.sent_at == [START_S]


def test_the_deadline_counts_from_the_first_failure_seen() -> None:
    mark = request(AcquireMode.MARK, KEEP_MS)
    assert retry_deadline_s(mark, WINDOW_END_S, START_S) == START_S + 19
    # A window that ends later still holds.
    assert retry_deadline_s(mark, START_S + 100, START_S) == START_S + 100
    # A short keep keeps a quarter of itself for the trip.
    assert retry_deadline_s(request(AcquireMode.MARK, 2000), 0, START_S) == START_S + 1.5
    assert retry_deadline_s(request(AcquireMode.RUN, 0), WINDOW_END_S, START_S) == WINDOW_END_S
    # A run's decision that failed first past its window (sent late, by a node frozen since
    # its win) is sent again as long; one that failed in time is given up with the window.
    run = request(AcquireMode.RUN, KEEP_MS)
    assert retry_deadline_s(run, WINDOW_END_S, START_S) == START_S + 19
    assert retry_deadline_s(run, START_S + 5, START_S) == START_S + 5
