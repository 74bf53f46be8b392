"""A job whose decision meets a busy row (JobBusyError: a row locked by another session, a
Cluster slot moving) is retried apart: the wake-up's other decisions are settled at once,
and the busy one is handed off, not reported as given up."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from cronrace.errors import JobBusyError
from cronrace.model.policies import Overlap
from cronrace.protocol import Answer as Said
from cronrace.protocol import DecideReply, DecideRequest, Verdict
from cronrace.runtime.observer import Observer
from cronrace.stores.values import Owner
from cronrace.testing import FakeClock
from cronrace.tick.acquire import Answer, decide_retrying

OWNER = Owner("n1", "x")


def request(job: str) -> DecideRequest:
    return DecideRequest(job, 100, 90, 90, (100,), (), str(OWNER), Overlap.SKIP, 5000, 60_000)


def granted(fence: int) -> DecideReply:
    return DecideReply(Said.DECIDED, 100, Verdict.RUN, fence, ticks_s=(100,))


class BusyStore:
    """Answers job "locked" with JobBusyError, every other job with a grant."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    async def decide(self, requests: Sequence[DecideRequest]) -> list[DecideReply | Exception]:
        self.sent.append([r.job for r in requests])
        return [JobBusyError("row locked") if r.job == "locked" else granted(7) for r in requests]


async def test_a_busy_job_is_handed_off_and_the_others_are_settled_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = BusyStore()
    settled: list[int] = []
    handed: list[int] = []
    ready: list[bool] = []

    def settle(indexes: list[int], answers: list[Answer]) -> None:
        settled.extend(indexes)
        assert all(isinstance(answers[i][0], DecideReply) for i in indexes)

    caplog.set_level(logging.INFO, logger="cronrace")
    answers: list[Answer] = []

    def keep(indexes: list[int], so_far: list[Answer]) -> None:
        settle(indexes, so_far)
        answers[:] = so_far

    await decide_retrying(
        store,  # type: ignore[arg-type]
        FakeClock(1_000.0),
        [request("a"), request("locked"), request("b")],
        [2_000.0] * 3,
        observer=Observer(),
        set_ready=lambda reachable, **_: ready.append(reachable),
        settle=keep,
        hand_off=handed.extend,
    )
    assert store.sent == [["a", "locked", "b"]], "one attempt: the busy job is not retried here"
    assert (sorted(settled), handed) == ([0, 2], [1])
    assert isinstance(answers[1][0], JobBusyError)
    assert ready == [True], "a busy job is no outage"
    assert not [r for r in caplog.records if "will not run" in r.getMessage()]
    assert any("retrying it apart" in r.getMessage() for r in caplog.records)
