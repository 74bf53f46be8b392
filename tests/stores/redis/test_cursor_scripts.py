"""The dense cursor's scripts as Redis holds them: a flushed script cache, and garbage.

``decide.lua``, ``renew_lease.lua`` and ``end_run.lua`` on the embedded store, a real
redis-server and a real Cluster: a server that lost its scripts (a restart, a failover,
``SCRIPT FLUSH``) is sent them again within the same call, and garbage under any key a
decision reads is moved aside before its first write, reported, and the decision made.
"""

from __future__ import annotations

import logging

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import Answer, DecideReply, DecideRequest, Release, Renewal, RenewRequest
from cronrace.stores.redis import Store
from cronrace.stores.values import Owner, RunEnd
from tests.stores.redis.test_garbage import WRITERS, assert_moved_aside, wrong_types
from tests.topology import keys_matching

OWNER = Owner("n1", "x")


def decision(job: str, tick_s: int, cursor_s: int | None = None) -> DecideRequest:
    return DecideRequest(
        job, tick_s, cursor_s, tick_s - 60, (tick_s,), (), str(OWNER), Overlap.QUEUE_ONE,
        5000, 60_000,
    )  # fmt: skip


async def decide(store: Store, request: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([request])
    assert isinstance(reply, DecideReply), reply
    return reply


async def test_a_flushed_script_cache_is_refilled_within_the_call(store: Store) -> None:
    try:
        await store.client.script_flush()
        replies = await store.decide([decision("a", 600), decision("b", 600)])
        assert [getattr(r, "answer", r) for r in replies] == [Answer.DECIDED] * 2
        first = replies[0]
        assert isinstance(first, DecideReply)
        await store.client.script_flush()
        assert await store.renew_lease("a", RenewRequest(first.fence, 5000)) is Renewal.RENEWED
        await store.client.script_flush()
        ended = await store.end_run(RunEnd("a", first.fence, OWNER, 5000, None, 0))
        assert ended.decision is Release.RELEASED
    finally:
        await store.prepare()  # the server is shared: leave its cache as it was found


#: The keys decide.lua reads (Keys' spelling), the type each holds, and its report's name.
DECIDE_KEYS = {
    "lease": ("hash", "lease"),
    "fence": ("string", "fence"),
    "cursor": ("string", "cursor"),
    "pending": ("string", "pending"),
    "state": ("hash", "state"),
    "hold": ("string", "hold"),
    "runs": ("stream", "runs"),
    "triggers": ("hash", "triggers"),
}


@pytest.mark.parametrize(
    ("name", "garbage", "kind"),
    [
        pytest.param(name, garbage, kind, id=f"{garbage}-under-{name}")
        for name, (right, kind) in DECIDE_KEYS.items()
        for garbage in wrong_types(right)
        if not (name == "hold" and garbage == "string")  # any string is a hold
    ],
)
async def test_decide_moves_a_wrong_type_aside_and_decides(
    store: Store, name: str, garbage: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    key = getattr(store.keys, name)("j")
    await WRITERS[garbage](store.client, key)
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        reply = await decide(store, decision("j", 600))
    assert reply.answer is Answer.DECIDED
    assert await store.cursors(["j"]) == {"j": 600}
    (moved,) = await keys_matching(store.client, f"{store.keys.quarantine('j')}:{kind}:*")
    await assert_moved_aside(store, garbage, moved.decode())
    logged = [r for r in caplog.records if getattr(r, "key", None) == key]
    assert logged, "the ERROR log names the full key"
    # The job goes on: the next decision meets clean keys.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.redis"):
        again = await decide(store, decision("j", 660, cursor_s=600))
    assert again.answer is Answer.DECIDED
    assert not caplog.records


@pytest.mark.parametrize("garbage", ["list", "hash", "set", "zset", "stream"])
async def test_a_claim_holding_garbage_is_moved_aside_and_the_tick_decided(
    store: Store, garbage: str
) -> None:
    await WRITERS[garbage](store.client, store.keys.claim("j", 600))
    reply = await decide(store, decision("j", 600))
    assert reply.answer is Answer.DECIDED
    assert len(await keys_matching(store.client, f"{store.keys.quarantine('j')}:claim:*")) == 1


@pytest.mark.parametrize("garbage", wrong_types("stream"))
async def test_a_run_ends_past_garbage_under_its_history(store: Store, garbage: str) -> None:
    granted = await decide(store, decision("j", 600))
    await store.client.delete(store.keys.runs("j"))
    await WRITERS[garbage](store.client, store.keys.runs("j"))
    record = RunRecord("j", 600, "n1", Outcome.OK, fence=granted.fence)
    ended = await store.end_run(RunEnd("j", granted.fence, OWNER, 5000, record, 10))
    assert ended.decision is Release.RELEASED
    assert await store.history("j", 10) == [record]
    assert len(await keys_matching(store.client, f"{store.keys.quarantine('j')}:runs:*")) == 1


@pytest.mark.parametrize("garbage", ["string", "list", "set", "zset", "stream"])
async def test_renew_lease_moves_a_wrong_type_lease_aside_and_says_it_is_gone(
    store: Store, garbage: str
) -> None:
    await WRITERS[garbage](store.client, store.keys.lease("j"))
    assert await store.renew_lease("j", RenewRequest(5, 5000, str(OWNER))) is Renewal.GONE
    assert await store.client.exists(store.keys.lease("j")) == 0
    assert len(await keys_matching(store.client, f"{store.keys.quarantine('j')}:lease:*")) == 1
