"""Releases of finished runs: those that finish together share one round trip."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from cronrace.errors import RedisAmbiguousError, StoreError
from cronrace.model.job import Job
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import Answer, DecideRequest, Release, ReleaseReply, Verdict
from cronrace.runtime.clock import SystemClock
from cronrace.runtime.retry import Backoff
from cronrace.stores.redis import Store
from cronrace.stores.values import Owner, RunEnd
from cronrace.testing import FakeClock
from cronrace.tick import releases as releases_module
from cronrace.tick.outbox import Outbox
from cronrace.tick.releases import Releases

OWNER = Owner("n0", "x")


class CountingStore(Store):
    """Counts the batches of releases sent; fails the next ``fail`` batches whole."""

    batches: list[int]
    fail = 0
    #: Set: the next batch is sent, then its answer never comes (until cancelled).
    hang_after_send: anyio.Event | None = None

    async def end_runs(self, requests: Sequence[RunEnd]) -> list[ReleaseReply | StoreError]:
        self.batches.append(len(requests))
        if self.fail:
            self.fail -= 1
            raise RedisAmbiguousError("Connection reset by peer")
        replies = await super().end_runs(requests)
        if self.hang_after_send is not None:
            sent, self.hang_after_send = self.hang_after_send, None
            sent.set()
            await anyio.sleep_forever()
        return replies


@pytest.fixture
async def store(namespace: str) -> CountingStore:
    store = CountingStore.from_url(f"memory://{namespace}", namespace)
    assert isinstance(store, CountingStore)
    store.batches = []
    return store


def job(name: str) -> Job:
    return Job.define(lambda ctx: None, "* * * * *", name=name, lease_ttl=5)


async def granted(store: Store, names: list[str], tick_s: int = 100) -> list[int]:
    requests = [
        DecideRequest(
            name, tick_s, None, tick_s - 1, (tick_s,), (), str(OWNER), Overlap.SKIP, 5000, 60_000
        )
        for name in names
    ]
    fences = []
    for reply in await store.decide(requests):
        assert not isinstance(reply, Exception)
        assert (reply.answer, reply.verdict) == (Answer.DECIDED, Verdict.RUN)
        fences.append(reply.fence)
    return fences


def releases(store: Store) -> Releases:
    clock = SystemClock()
    return Releases(store, clock, OWNER, Outbox(store, clock))


def ok(name: str, fence: int, tick_s: int = 100) -> RunRecord:
    return RunRecord(name, tick_s, "n0", Outcome.OK, fence, finished_ms=tick_s * 1000)


async def finish_all(
    rel: Releases, names: list[str], fences: list[int]
) -> dict[str, ReleaseReply | None]:
    replies: dict[str, ReleaseReply | None] = {}

    async def one(name: str, fence: int) -> None:
        until = anyio.current_time() + 5
        replies[name] = await rel.finish(job(name), ok(name, fence), fence, until_mono=until)

    async with anyio.create_task_group() as tg:
        for name, fence in zip(names, fences, strict=True):
            tg.start_soon(one, name, fence)
    return replies


async def test_runs_finishing_together_release_in_one_round_trip(store: CountingStore) -> None:
    names = [f"j{index}" for index in range(5)]
    fences = await granted(store, names)
    replies = await finish_all(releases(store), names, fences)
    assert store.batches == [5]
    assert {name: reply and reply.decision for name, reply in replies.items()} == dict.fromkeys(
        names, Release.RELEASED
    )
    for name, fence in zip(names, fences, strict=True):
        (state,) = await store.job_states([name])
        assert state.lease is None
        assert [
            (r.fence, r.outcome) for r in await store.history(name, 5) if r.outcome != "granted"
        ] == [(fence, "ok")]


async def test_a_failed_batch_is_retried_and_records_each_run_once(store: CountingStore) -> None:
    names = ["a", "b", "c"]
    fences = await granted(store, names)
    store.fail = 1
    replies = await finish_all(releases(store), names, fences)
    assert store.batches == [3, 3]
    assert all(reply is not None for reply in replies.values())
    for name in names:
        assert len([r for r in await store.history(name, 5) if r.outcome != "granted"]) == 1


async def test_a_batch_cut_short_before_it_was_sent_is_sent_by_the_others(
    store: CountingStore,
) -> None:
    names = ["a", "b"]
    fences = await granted(store, names)
    rel = releases(store)
    replies: dict[str, ReleaseReply | None] = {}

    async def first() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()  # cancelled at its first checkpoint: before the batch is sent
            await rel.finish(job("a"), ok("a", fences[0]), fences[0], until_mono=1e18)

    async def second() -> None:  # started right after the first: joins its batch
        replies["b"] = await rel.finish(job("b"), ok("b", fences[1]), fences[1], until_mono=1e18)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(second)
    reply = replies["b"]
    assert reply is not None
    assert reply.decision is Release.RELEASED
    assert store.batches == [1]
    (state,) = await store.job_states(["a"])
    assert state.lease is not None  # the cancelled release did not go out
    assert rel.outbox.pending == 1  # its record waits in the outbox


async def test_a_batch_cut_short_on_the_wire_counts_as_a_lost_reply_for_the_others(
    store: CountingStore,
) -> None:
    names = ["a", "b"]
    fences = await granted(store, names)
    rel = releases(store)
    sent = store.hang_after_send = anyio.Event()
    replies: dict[str, ReleaseReply | None] = {}

    async def first(scope: anyio.CancelScope) -> None:
        with scope:
            await rel.finish(job("a"), ok("a", fences[0]), fences[0], until_mono=1e18)

    async def second() -> None:  # started right after the first: joins its batch
        replies["b"] = await rel.finish(job("b"), ok("b", fences[1]), fences[1], until_mono=1e18)

    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        tg.start_soon(first, scope)
        tg.start_soon(second)
        await sent.wait()
        scope.cancel()  # both releases reached Redis; the answer is lost to the cancel
    assert store.batches == [2, 1]  # the second retried on its own
    reply = replies["b"]
    assert reply is not None
    assert reply.decision is Release.NOT_OWNER  # released by the first attempt
    for name in names:
        (state,) = await store.job_states([name])
        assert state.lease is None
        assert (
            len([r for r in await store.history(name, 5) if r.outcome != "granted"]) == 1
        )  # each record once


async def test_a_release_waits_between_attempts_on_the_agents_clock(
    store: CountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that keeps failing pauses on the agent's clock and gives up at its lease's
    deadline on that clock. The pauses were on the event loop's own clock: under a fake
    clock they never ended, and an agent stopping with such a release never finished (the
    scheduler model, seed 17). Pauses of 10 s make the difference plain."""
    monkeypatch.setattr(
        releases_module, "RELEASE_BACKOFF", Backoff(start_s=10.0, max_s=10.0, jitter=False)
    )
    clock = FakeClock()
    rel = Releases(store, clock, OWNER, Outbox(store, clock))
    (fence,) = await granted(store, ["a"])
    store.fail = 1_000_000
    replies: list[ReleaseReply | str | None] = ["pending"]

    async def finish() -> None:
        until = clock.monotonic() + 25
        replies[0] = await rel.finish(job("a"), ok("a", fence), fence, until_mono=until)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(finish)
            await clock.advance(60)
    assert replies == [None]  # given up at the deadline: the record waits in the outbox
    assert len(store.batches) >= 4
