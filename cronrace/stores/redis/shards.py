"""Pipelines, one per shard: how a batch of commands reaches the deployment.

On one primary (Sentinel included) a batch is one pipeline. On a cluster it is one
pipeline per primary that holds some of its keys, all sent at once: a wake-up costs one
round trip per shard, and a shard that does not answer fails only its own items. This,
``client.py`` and ``clusterclient.py`` are the only modules that know which deployment is
in use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from cronrace.errors import RedisAccessError


@dataclass(frozen=True, slots=True)
class ShardReply:
    """What one item's commands got back from the shard that holds its key.

    Attributes:
        replies: the item's replies in order (each a value, or the error Redis answered
            for that command), or the exception that failed its shard's whole pipeline:
            then the item's writes may or may not have happened.
        acked: replicas that confirmed the shard's writes (``WAIT``), when asked for;
            0 when the shard could not say.
    """

    replies: list[Any] | BaseException
    acked: int = 0


#: Errors that fail one shard's pipeline as a whole (redis-py's cluster errors that are not
#: RedisError subclasses included, and the refusals the client translated already).
SHARD_ERRORS: tuple[type[BaseException], ...] = (
    RedisError,
    RedisClusterException,
    OSError,
    RedisAccessError,
)


_CLUSTER_TYPES: dict[type, bool] = {}


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Cluster client. ``isinstance`` against ``RedisCluster`` goes
    through ``typing.Protocol``'s metaclass (a few µs, twice a pipeline): asked once per
    client class."""
    kind = type(client)
    known = _CLUSTER_TYPES.get(kind)
    if known is None:
        known = _CLUSTER_TYPES[kind] = isinstance(client, RedisCluster)
    return known


#: Keys per ``MGET`` of :func:`get_many`: one reply stays small enough not to hold the
#: server (or the client's parser) for long.
MGET_CHUNK = 1000


async def get_many(client: Any, keys: Sequence[str]) -> list[Any]:
    """``GET`` of every key, in order: each a value, None, or the error Redis answered.

    On one primary (Sentinel included): one pipeline of ``MGET`` of up to
    :data:`MGET_CHUNK` keys each (a key of another type reads as None), which costs the
    client a fraction of a ``GET`` per key (a node of 10,000 jobs reads 20,000 keys at
    start-up: 26 % of its start-up CPU as one ``GET`` each). On a cluster, where the keys
    lie in many slots, one ``GET`` per key (a key of another type answers ``WRONGTYPE``).
    """
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    if is_cluster(client):
        for key in keys:
            pipe.get(key)
        return list(await pipe.execute(raise_on_error=False))
    for start in range(0, len(keys), MGET_CHUNK):
        pipe.mget(keys[start : start + MGET_CHUNK])
    return [value for chunk in await pipe.execute() for value in chunk]


async def per_shard(
    client: Any,
    keys: Sequence[str],
    add: Callable[[Any, int], object],
    *,
    wait_replicas: int = 0,
    wait_ms: int = 0,
) -> list[ShardReply]:
    """Send item ``i``'s commands (``add(pipe, i)``) in one pipeline per shard, in parallel.

    On one primary (Sentinel included) that is one pipeline; on a cluster, one per primary
    that holds some ``keys[i]``, so a wake-up costs one round trip per shard and a shard
    that does not answer fails only its own items. With ``wait_replicas``, each pipeline
    ends with ``WAIT`` on the connection that wrote the shard's items: ``WAIT`` covers
    the writes of its own connection only.
    """
    groups: dict[Any, list[int]] = {}
    if is_cluster(client):
        try:
            await client.initialize()
        except SHARD_ERRORS as exc:
            return [ShardReply(exc) for _ in keys]
        for index, key in enumerate(keys):
            groups.setdefault(client.get_node_from_key(key), []).append(index)
    elif keys:
        groups[None] = list(range(len(keys)))
    out: list[ShardReply | None] = [None] * len(keys)

    async def one_shard(node: Any, indexes: list[int]) -> None:
        pipe = client.pipeline(transaction=False)
        # A plain pipeline's length is its stack's (len(pipe) is a Python call, two a run).
        stack = getattr(pipe, "command_stack", None)
        spans = []
        for index in indexes:
            start = len(pipe) if stack is None else len(stack)
            add(pipe, index)
            spans.append((index, start, len(pipe) if stack is None else len(stack)))
        if wait_replicas > 0:
            target = {} if node is None else {"target_nodes": node}
            pipe.execute_command("WAIT", wait_replicas, wait_ms, **target)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except SHARD_ERRORS as exc:
            if is_cluster(client):
                # redis-py re-reads the slot map only when a single command fails, never
                # after a pipeline: ask for it, so that the next call finds a promoted
                # replica (the attribute redis-py's own error handling sets).
                client._initialize = True
            for index in indexes:
                out[index] = ShardReply(exc)
            return
        acked = replies[-1] if wait_replicas > 0 else 0
        acked = acked if isinstance(acked, int) else 0
        for index, start, end in spans:
            out[index] = ShardReply(list(replies[start:end]), acked)

    if len(groups) == 1:  # one primary: no task to start for it
        (node, indexes), *_none = groups.items()
        await one_shard(node, indexes)
    else:
        async with anyio.create_task_group() as tg:
            for node, indexes in groups.items():
                tg.start_soon(one_shard, node, indexes)
    return [reply for reply in out if reply is not None]
