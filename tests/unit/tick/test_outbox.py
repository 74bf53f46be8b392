"""The outbox: run records Redis could not take are kept, written later, never twice."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import pytest

from cronrace.errors import RedisAmbiguousError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.runtime.clock import SystemClock
from cronrace.runtime.retry import Backoff
from cronrace.stores.redis import Store
from cronrace.testing import FakeClock
from cronrace.tick.outbox import Outbox
from tests.helpers import wait_for

#: Retry every 10 ms.
QUICK = Backoff(start_s=0.01, max_s=0.01, jitter=False)


class FlakyStore(Store):
    """A store whose record writes fail while ``down``; ``lose_replies`` writes, then fails."""

    down = False
    lose_replies = False
    #: Yield to the event loop after writing, where a cancellation lands: whether the
    #: embedded store's own write yields depends on the redis-py version (8.2's does not).
    yield_after_write = False

    async def record(self, records: Sequence[RunRecord], *, history: int) -> None:
        if self.down:
            raise RedisAmbiguousError("Connection refused")
        await super().record(records, history=history)
        if self.yield_after_write:
            await anyio.lowlevel.checkpoint()
        if self.lose_replies:
            raise RedisAmbiguousError("Connection reset by peer")


def record(tick_s: int, outcome: Outcome = Outcome.LEASE_LOST, fence: int = 7) -> RunRecord:
    return RunRecord("job", tick_s, "n0", outcome, fence, finished_ms=tick_s * 1000)


@pytest.fixture
async def flaky(namespace: str) -> FlakyStore:
    store = FlakyStore.from_url(f"memory://{namespace}", namespace)
    assert isinstance(store, FlakyStore)
    return store


async def test_records_redis_refused_are_written_once_it_answers_again(flaky: FlakyStore) -> None:
    outbox = Outbox(flaky, SystemClock(), backoff=QUICK)
    flaky.down = True
    assert await outbox.write([record(100)], history=100) is False
    assert outbox.pending == 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await anyio.sleep(0.05)
        assert await flaky.history("job", 10) == []
        flaky.down = False
        await wait_for(lambda: outbox.pending == 0, timeout_s=5, what="the outbox to drain")
        tg.cancel_scope.cancel()
    assert [r.outcome for r in await flaky.history("job", 10)] == [Outcome.LEASE_LOST]


async def test_a_write_whose_reply_was_lost_is_not_written_twice(flaky: FlakyStore) -> None:
    outbox = Outbox(flaky, FakeClock(), backoff=QUICK)
    flaky.lose_replies = True
    assert await outbox.write([record(100), record(101)], history=100) is False
    flaky.lose_replies = False
    await outbox.write([record(102, Outcome.OK)], history=100)
    assert await outbox.flush() is True
    ticks = sorted(r.tick_s for r in await flaky.history("job", 10))
    assert ticks == [100, 101, 102]


async def test_a_write_cut_short_by_cancellation_is_kept(flaky: FlakyStore) -> None:
    outbox = Outbox(flaky, FakeClock(), backoff=QUICK)
    flaky.yield_after_write = True  # written, then cancelled before the reply is taken
    with anyio.CancelScope() as scope:
        scope.cancel()
        await outbox.write([record(100)], history=100)
    assert outbox.pending == 1
    assert await outbox.flush() is True
    assert [r.tick_s for r in await flaky.history("job", 10)] == [100]


async def test_a_full_outbox_drops_the_oldest_and_logs_what_it_dropped(
    flaky: FlakyStore, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = Outbox(flaky, FakeClock(), backoff=QUICK, capacity=2)
    flaky.down = True
    with caplog.at_level(logging.ERROR, logger="cronrace.tick.outbox"):
        for tick_s in (100, 101, 102):
            await outbox.write([record(tick_s, fence=tick_s)], history=100)
        outbox.give_up("the agent is exiting")
    dropped = [r.__dict__ for r in caplog.records if r.getMessage() == "run record dropped"]
    assert [(d["tick"], d["fence"], d["outcome"], d["why"]) for d in dropped] == [
        (100, 100, "lease_lost", "the outbox is full"),
        (101, 101, "lease_lost", "the agent is exiting"),
        (102, 102, "lease_lost", "the agent is exiting"),
    ]
    assert all(d["job"] == "job" for d in dropped)
    assert outbox.pending == 0
    assert outbox.dropped == 3
