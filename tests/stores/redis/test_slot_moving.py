"""A Cluster slot half-moved by a live resharding: what the store answers meanwhile.

The slot of job ``j`` is set ``MIGRATING`` on its primary and ``IMPORTING`` on another,
and one of its keys is moved: new keys of the slot are then written on the target after
an ``ASK``, and a script whose keys are partly on each side is refused with ``TRYAGAIN``
until the slot has moved. Claims must go through, and a decision must come back as
"moving" (retried: it did not run), never as a script failure; once the slot has moved,
the same decision runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cronrace.errors import RedisMovingError
from cronrace.model.policies import Overlap
from cronrace.protocol import DecideReply, Verdict
from cronrace.stores.redis import Store, make_client
from cronrace.stores.values import Claim, Owner
from tests.stores.contract.helpers import request
from tests.topology import REDIS_CLI, ClusterSet, client

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterSet]:
    if REDIS_CLI is None:
        pytest.skip("redis-cli is not installed")
    cluster = ClusterSet(tmp_path / "cluster", replicas=0).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class HalfMoved:
    """The slot of ``{j}``, moved key by key from its primary to another."""

    def __init__(self, cluster: ClusterSet) -> None:
        self.cluster = cluster
        self.slot = int(client(cluster.nodes[0].port).cluster("keyslot", "{j}"))
        self.source = cluster.primary_of("{j}").port
        self.target = next(n.port for n in cluster.primaries() if n.port != self.source)

    def _id(self, port: int) -> str:
        return str(client(port).execute_command("CLUSTER", "MYID"))

    def begin(self, keys: int) -> None:
        src, dst = client(self.source), client(self.target)
        dst.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", self._id(self.source))
        src.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", self._id(self.target))
        for key in src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, keys):
            src.execute_command("MIGRATE", "127.0.0.1", self.target, key, 0, 5000)

    def finish(self) -> None:
        src = client(self.source)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "KEYS", *keys)
        target_id = self._id(self.target)
        ports = [self.target] + [n.port for n in self.cluster.primaries() if n.port != self.target]
        for port in ports:
            client(port).execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", target_id)


async def test_claims_and_decisions_pass_while_their_slot_moves(
    cluster: ClusterSet, namespace: str
) -> None:
    store = Store(make_client(cluster.url), namespace)
    await store.prepare()
    owner = Owner("n1", "x")
    try:
        assert await store.claim([Claim("j", 100, 60_000)], owner) == [True]
        (first,) = await store.decide([request(tick=100)])
        assert isinstance(first, DecideReply)
        moving = HalfMoved(cluster)
        moving.begin(keys=1)
        # Many claims at once: each node's pool holds several connections, and the ASK
        # must reach the target on the connection of the claim it allows.
        results: list[list[bool]] = []

        async def claim(tick: int) -> None:
            results.append(await store.claim([Claim("j", tick, 60_000)], owner))

        async with anyio.create_task_group() as tg:
            for tick in range(101, 141):
                tg.start_soon(claim, tick)
        assert results == [[True]] * 40
        # Alone in its pipeline, a decision that did not run is raised (one that shares a
        # pipeline with others that ran is answered as its error: the same class).
        with pytest.raises(RedisMovingError):
            await store.decide([request(tick=101, cursor=100)])
        moving.finish()
        (decided,) = await store.decide([request(tick=101, cursor=100, overlap=Overlap.ALLOW)])
        assert isinstance(decided, DecideReply), decided
        assert decided.verdict is Verdict.RUN
        assert decided.fence > first.fence
    finally:
        await store.aclose()
