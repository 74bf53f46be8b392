"""The Redis store against the reference: the same state and request, the same reply and state.

Every example writes a drawn state (``strategies.py``) into a job's keys, sends the drawn
request to the store (``decide``, ``renew_lease``, ``end_run``), reads the job's keys back,
and requires the reference's reply and resulting state, or fails naming each field that
differs (``codec.py``). The reference runs at the server's ``TIME`` read just before the
example; values the store computes from its own clock during the call are compared within
the call's window (fences floored at the clock within its elapsed µs; see ``codec.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronrace import protocol
from cronrace.model.records import RunRecord
from cronrace.protocol import DecideRequest, ReleaseRequest, RenewRequest
from cronrace.stores.redis import Keys, Store
from cronrace.stores.values import Owner, RunEnd
from tests.stores.differential.codec import Window, assert_same
from tests.stores.differential.redis_codec import RedisCodec
from tests.stores.differential.strategies import (
    Case,
    decide_cases,
    release_cases,
    renew_cases,
)
from tests.stores.redis.backend import RedisDeployment

_jobs = itertools.count()

#: How many examples each test runs on each deployment.
EXAMPLES = {"memory": 150, "redis": 60, "cluster": 40}


class Bench:
    """One deployment's store, its keys as reference states, and its clock."""

    def __init__(self, deployment: RedisDeployment, namespace: str) -> None:
        self.client = deployment.client
        self.store = Store(self.client, namespace)
        self.codec = RedisCodec(self.client, Keys(namespace))
        self.examples = EXAMPLES[deployment.name]

    async def now_us(self) -> int:
        seconds, micros = await self.client.time()
        return int(seconds) * 1_000_000 + int(micros)

    async def check(self, case: Case, call: Any, reference: Any) -> None:
        """Load the case, make the store's call, compare with the reference's."""
        job = f"d{next(_jobs)}"
        start_us = await self.now_us()
        state, request = case.place(start_us // 1000, start_us)
        await self.codec.load(job, state, start_us // 1000)
        got_reply = await call(job, request)
        end_us = await self.now_us()
        got_state = await self.codec.read(job)
        want = reference(state, request, now_ms=start_us // 1000, now_us=start_us)
        context = f"job {job}, state {state!r}, request {request!r}"
        assert_same(want, (got_reply, got_state), Window.of(start_us, end_us), context=context)

    async def explore(
        self, cases: st.SearchStrategy[Case], check: Callable[[Case], Awaitable[None]]
    ) -> None:
        """Run ``check`` on this deployment's number of drawn cases.

        Hypothesis drives the examples from a worker thread, each example running on this
        test's event loop (the deployment's connections belong to it): the number of
        examples is the deployment's, not one for every deployment.
        """
        loop = asyncio.get_running_loop()

        @settings(
            max_examples=self.examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(case=cases)
        def examples(case: Case) -> None:
            asyncio.run_coroutine_threadsafe(check(case), loop).result(timeout=60)

        await asyncio.to_thread(examples)


async def _decide(store: Store, job: str, request: DecideRequest) -> Any:
    (reply,) = await store.decide([replace(request, job=job)])
    if isinstance(reply, Exception):
        raise reply
    return reply


def _run_end(job: str, request: ReleaseRequest) -> RunEnd:
    """The store's form of a reference release: a whole run record around its projection."""
    record = None
    if request.record is not None:
        r = request.record
        error = "boom" if r.outcome == "error" else None
        record = RunRecord(
            job, r.tick_s, r.node, r.outcome, r.fence, 1_000, 2_000, error, r.count,
            r.trigger_id, {"rows": 3}, r.last_s,
        )  # fmt: skip
    return RunEnd(
        job, request.fence, Owner.parse(request.owner), request.lease_ttl_ms, record, 0,
        request.hand_on,
    )  # fmt: skip


async def test_decide_matches_the_reference(deployment: RedisDeployment, namespace: str) -> None:
    bench = Bench(deployment, namespace)

    async def decide(job: str, request: DecideRequest) -> Any:
        return await _decide(bench.store, job, request)

    async def check(case: Case) -> None:
        await bench.check(case, decide, protocol.decide)

    await bench.explore(decide_cases(), check)


async def test_renew_lease_matches_the_reference(
    deployment: RedisDeployment, namespace: str
) -> None:
    bench = Bench(deployment, namespace)

    async def renew(job: str, request: RenewRequest) -> Any:
        return await bench.store.renew_lease(job, request)

    async def check(case: Case) -> None:
        await bench.check(case, renew, protocol.renew)

    await bench.explore(renew_cases(), check)


async def test_end_run_matches_the_reference(deployment: RedisDeployment, namespace: str) -> None:
    bench = Bench(deployment, namespace)

    async def end(job: str, request: ReleaseRequest) -> Any:
        run_end = _run_end(job, request)
        assert run_end.reference() == request
        return await bench.store.end_run(run_end)

    async def check(case: Case) -> None:
        await bench.check(case, end, protocol.release)

    await bench.explore(release_cases(), check)
