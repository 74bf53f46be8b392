"""The Redis Cluster client (``redis+cluster://``, docs/design.md section 11).

redis-py's ``RedisCluster``, with what cronrace needs of it: refusals translated like the
other clients' (:mod:`cronrace.stores.redis.client`), calls in flight bounded by a
semaphore instead of failing past a node's pool size, ``ASKING`` sent on the connection
of the command it allows, connections kept when a re-read of the slot map finds their
node unchanged, ``COMMAND`` read once, and an ``ASK`` to a node not yet in the slot map
followed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from redis.asyncio.cluster import ClusterNode, ClusterPipeline, NodesManager, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.cluster import PRIMARY
from redis.exceptions import RedisError

from cronrace.stores.redis.access import AccessWatch, pipeline_replies, raise_translated
from cronrace.stores.redis.packing import QuickSend
from cronrace.stores.redis.urls import RedisTarget


def cluster_client(
    target: RedisTarget, options: dict[str, Any], max_connections: int, access: AccessWatch
) -> RedisCluster:
    """The client of a Redis Cluster (``redis+cluster://``): redis-py's, made to translate
    refusals, send ``ASKING`` with its command, keep its connections across slot-map
    re-reads, and queue calls past ``max_connections`` instead of failing them."""
    options.pop("db")
    cluster = _WatchedCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.hosts],
        # Per node; the calls in flight are bounded by ``max_connections`` (below).
        max_connections=2 * max_connections,
        **options,
    )
    _asking_connections(cluster)
    # redis-py builds its NodesManager itself; only set_nodes differs (see the class).
    cluster.nodes_manager.__class__ = _KeepingNodesManager
    cluster.access = access
    cluster.in_flight = asyncio.Semaphore(max_connections)
    return cluster


#: Set while a call holds one of its cluster client's ``in_flight`` permits: calls that
#: redis-py makes from inside another (a pipeline's redirections) take none.
_HOLDS_PERMIT: ContextVar[bool] = ContextVar("cronrace_holds_permit", default=False)
#: Set while redis-py runs one command of a cluster client (its error handling inside).
_IN_ONE_COMMAND: ContextVar[bool] = ContextVar("cronrace_in_one_command", default=False)


@asynccontextmanager
async def _permit(in_flight: asyncio.Semaphore) -> AsyncIterator[None]:
    """Wait for a free connection's worth of room instead of failing without one.

    A cluster node's pool does not wait: past its size it raises ``MaxConnectionsError``
    (seen when fifty runs finished at once). Bounding the calls in flight by the pool size
    makes a burst queue up, as the single-primary pool does.
    """
    if _HOLDS_PERMIT.get():
        yield
        return
    async with in_flight:
        token = _HOLDS_PERMIT.set(True)
        try:
            yield
        finally:
            _HOLDS_PERMIT.reset(token)


class _WatchedClusterPipeline(ClusterPipeline):
    access: AccessWatch
    in_flight: asyncio.Semaphore
    _sent: list[tuple[Any, ...]]

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self._sent.append(args)
        return super().execute_command(*args, **kwargs)

    async def execute(
        self, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> list[Any]:
        commands, self._sent = self._sent, []
        try:
            async with _permit(self.in_flight):
                replies = await super().execute(False, allow_redirections)
        except RedisError as exc:
            raise_translated(self.access, exc, commands[0] if commands else ())
        return pipeline_replies(self.access, commands, replies, raise_on_error)


#: Set by a cluster connection asked to send ``ASKING`` alone: the node (host, port) whose
#: next command in this task must carry it.
_ASKING_FOR: ContextVar[tuple[str, int] | None] = ContextVar("cronrace_asking_for", default=None)


class _AskingOnOneConnection:
    """``ASKING`` sent on the same connection as the command it allows.

    An ``ASK`` redirection (a slot half-moved by a live resharding) allows one command on
    the node importing the slot, on the connection that sent ``ASKING`` just before it.
    redis-py 8.1's cluster client sends ``ASKING`` as a command of its own, taking a
    connection from the node's pool for it and another for the command: with more than
    one connection open, the command goes out without it, is sent back with ``MOVED``,
    and so on until redis-py gives up (``TTL exhausted``), for as long as the slot is
    half-moved. Here ``ASKING`` alone is only noted; the next command this task sends to
    the same node carries it, in the same write.
    """

    host: str
    port: int
    _asking_noted = False
    _asking_packed = False
    _asking_replies = 0

    def pack_command(self, *args: Any) -> list[bytes]:
        if len(args) == 1 and args[0] in ("ASKING", b"ASKING"):
            _ASKING_FOR.set((self.host, self.port))
            self._asking_noted = True
            return []
        packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
        if _ASKING_FOR.get() == (self.host, self.port):
            _ASKING_FOR.set(None)
            self._asking_packed = True
            asking: list[bytes] = super().pack_command("ASKING")  # type: ignore[misc]
            return asking + packed
        return packed

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self._asking_noted and not command:
            return
        # Counted once sent: a connection opened by this send reads its handshake first.
        packed, self._asking_packed = self._asking_packed, False
        await super().send_packed_command(command, check_health)  # type: ignore[misc]
        if packed:
            self._asking_replies += 1

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if self._asking_noted:
            self._asking_noted = False
            return b"OK"
        while self._asking_replies:
            self._asking_replies -= 1
            await super().read_response(*args, **kwargs)  # type: ignore[misc]  # ASKING's OK
        return await super().read_response(*args, **kwargs)  # type: ignore[misc]


# Sending as cronrace's other connections send (packing.py).
class _AskingConnection(_AskingOnOneConnection, QuickSend, Connection):
    pass


class _AskingSSLConnection(_AskingOnOneConnection, QuickSend, SSLConnection):
    pass


def _asking_connections(cluster: RedisCluster) -> None:
    """Make every connection of ``cluster`` send ``ASKING`` with its command."""
    kind = cluster.connection_kwargs.get("connection_class")
    asking = _AskingSSLConnection if kind is SSLConnection else _AskingConnection
    for kwargs in (cluster.connection_kwargs, cluster.nodes_manager.connection_kwargs):
        kwargs["connection_class"] = asking
    for node in cluster.nodes_manager.startup_nodes.values():
        node.connection_class = asking


class _KeepingNodesManager(NodesManager):
    """redis-py's slot map, keeping the connections of nodes a re-read finds unchanged.

    redis-py (8.1) marks every connection of every node for reconnection each time it
    re-reads the slot map (every fifth MOVED, every CLUSTERDOWN or connection error), in
    case a connection carries a replica's READONLY state. Ours never do (every command goes
    to a primary), and a connection to the same address in the same role routes each
    command by the slot map, not by the connection: it stays valid when slots move. A live
    migration re-read the map several times per agent and reopened all its connections each
    time (170 connections opened across the primaries while 4 slots moved, 3 agents, 49 in
    the same time at rest; tests/faults/test_slot_migration.py). A node whose role changed
    is still reconnected, and one that left is still disconnected.
    """

    __slots__ = ()  # the layout of redis-py's class, so that its instance can become one

    def set_nodes(
        self,
        old: dict[str, ClusterNode],
        new: dict[str, ClusterNode],
        remove_old: bool = False,
    ) -> None:
        if remove_old:
            gone = {name: old.pop(name) for name in list(old) if name not in new}
            super().set_nodes(gone, {}, remove_old=True)  # disconnects them
        changed = {
            name: node
            for name, node in new.items()
            if name not in old or old[name].server_type != node.server_type
        }
        super().set_nodes(old, changed)


class _WatchedCluster(RedisCluster):
    """redis-py's cluster client, translating refusals like :class:`WatchedRedis`.

    Once started, it re-reads only the slot map. redis-py (8.1) re-runs ``COMMAND`` on the
    first primary of the slot map each time it re-reads the map, and when that fails it
    closes every connection of the client. While a killed primary is still listed (until
    its replica is promoted), every re-read after an error would then fail all shards, and
    a dead shard must cost only its own jobs. ``COMMAND`` answers the same on every node:
    it is read once, at the first start.
    """

    access: AccessWatch
    in_flight: asyncio.Semaphore

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> RedisCluster:
        if not self._initialize or not getattr(self.commands_parser, "commands", None):
            return await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._initialize:
                await self.nodes_manager.initialize(
                    additional_startup_nodes_info, last_failed_node_name
                )
                self._initialize = False
        return self

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        """The node at ``host:port``, added to the slot map's nodes if it is not there yet.

        redis-py (8.2) follows an ``ASK`` with ``get_node(host, port)``; a node that joined
        after the slot map was read (a new primary receiving slots) was not found, and the
        claim failed with ``'NoneType' object has no attribute 'connection_kwargs'`` until
        the slot had moved (tests/faults/test_cluster_operations.py). A ``MOVED`` to it
        already adds it (``NodesManager.move_slot``): this does the same for an ``ASK``.
        """
        node = super().get_node(host, port, node_name)
        if node is None and host and port:
            manager = self.nodes_manager
            node = ClusterNode(host, port, PRIMARY, **manager.connection_kwargs)
            manager.set_nodes(manager.nodes_cache, {node.name: node})
        return node

    async def _execute_command(self, target_node: Any, *args: Any, **kwargs: Any) -> Any:
        token = _IN_ONE_COMMAND.set(True)
        try:
            return await super()._execute_command(target_node, *args, **kwargs)
        finally:
            _IN_ONE_COMMAND.reset(token)

    async def aclose(self) -> None:
        """Close every connection (the store is closing).

        redis-py also calls this from inside a command that met ``CLUSTERDOWN`` (every
        shard answers it while a failed primary is being replaced), only to re-read the
        slot map; closing then would cut the calls in flight on every shard, their replies
        lost after they ran. Such a call only asks for the re-read.
        """
        if _IN_ONE_COMMAND.get():
            self._initialize = True
            return
        await super().aclose()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            async with _permit(self.in_flight):
                reply = await super().execute_command(*args, **kwargs)
        except RedisError as exc:
            raise_translated(self.access, exc, args)
        self.access.went_through((args,))
        return reply

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        pipe = _WatchedClusterPipeline(self, transaction)  # type: ignore[abstract]
        pipe.access = self.access
        pipe.in_flight = self.in_flight
        pipe._sent = []
        return pipe
