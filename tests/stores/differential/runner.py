"""The differential tests' steps, for any store: load a drawn state, call, compare.

A backend runs them with a :class:`Bench` of its own (its store, its :class:`StateCodec`,
its server clock, how many examples) and the three checks below: see ``test_redis.py``.
Every example writes a drawn state (``strategies.py``) into a job of its own, sends the
drawn request to the store (``decide``, ``renew_lease``, ``end_run``), reads the job back,
and requires the reference's reply and resulting state, or fails naming each field that
differs (``codec.py``). The reference runs at the server's clock read just before the
example; values the store computes from its own clock during the call are compared within
the call's window (fences floored at the clock within its elapsed µs; see ``codec.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronrace import protocol
from cronrace.model.records import RunRecord
from cronrace.protocol import DecideRequest, ReleaseRequest, RenewRequest
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner, RunEnd
from tests.stores.differential.codec import StateCodec, Window, assert_same
from tests.stores.differential.strategies import (
    Case,
    decide_cases,
    release_cases,
    renew_cases,
)

_jobs = itertools.count()


@dataclass
class Bench:
    """One backend under test.

    Attributes:
        store: the store (a job of its own per example).
        codec: its storage as reference states.
        now_us: reads the server's clock, in µs (the store's ``now``).
        examples: how many examples each check runs.
    """

    store: Store
    codec: StateCodec
    now_us: Callable[[], Awaitable[int]]
    examples: int

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
        self, cases: st.SearchStrategy[Case], check: Callable[[Case], Coroutine[Any, Any, None]]
    ) -> None:
        """Run ``check`` on this bench's number of drawn cases.

        Hypothesis drives the examples from a worker thread, each example running on this
        test's event loop (the store's connections belong to it): the number of examples
        is the backend's, not one for every backend.
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


async def decide_matches_the_reference(bench: Bench) -> None:
    """``Store.decide`` (a batch of one) answers and writes what ``protocol.decide`` does."""

    async def decide(job: str, request: DecideRequest) -> Any:
        (reply,) = await bench.store.decide([replace(request, job=job)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def check(case: Case) -> None:
        await bench.check(case, decide, protocol.decide)

    await bench.explore(decide_cases(), check)


async def renew_lease_matches_the_reference(bench: Bench) -> None:
    """``Store.renew_lease`` answers and writes what ``protocol.renew`` does."""

    async def renew(job: str, request: RenewRequest) -> Any:
        return await bench.store.renew_lease(job, request)

    async def check(case: Case) -> None:
        await bench.check(case, renew, protocol.renew)

    await bench.explore(renew_cases(), check)


async def end_run_matches_the_reference(bench: Bench) -> None:
    """``Store.end_run`` answers and writes what ``protocol.release`` does (the record
    sent whole: the reference keeps its projection)."""

    async def end(job: str, request: ReleaseRequest) -> Any:
        run_end = _run_end(job, request)
        assert run_end.reference() == request
        return await bench.store.end_run(run_end)

    async def check(case: Case) -> None:
        await bench.check(case, end, protocol.release)

    await bench.explore(release_cases(), check)


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
