"""Replicated Redis deployments for tests: Sentinel (primary, replica, sentinels) and Cluster.

Every process runs on a free loopback port with its data under the test's directory, is
started by the test and stopped by it. Waits are conditions with deadlines, never sleeps.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from cronrace.testing import REDIS_SERVER, RedisServer, free_port

REDIS_CLI = shutil.which("redis-cli")


def wait_until(check: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except (redis.RedisError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


async def keys_matching(async_client: Any, pattern: str) -> list[bytes]:
    """``KEYS pattern`` on every primary: a cluster client sends KEYS to one node only."""
    from redis.asyncio.cluster import RedisCluster

    if isinstance(async_client, RedisCluster):
        found = await async_client.keys(pattern, target_nodes=RedisCluster.PRIMARIES)
    else:
        found = await async_client.keys(pattern)
    return list(found)


def client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=2, decode_responses=True)


def in_sync(replica_port: int) -> bool:
    info = client(replica_port).info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


class DataNode(RedisServer):
    """A redis-server without persistence whose arguments can change between starts."""

    #: A replica's first sync would wait five seconds (Redis 7's diskless sync delay).
    FAST_SYNC = ("--repl-diskless-sync-delay", "0")

    def __init__(self, directory: Path, *extra: str, port: int | None = None) -> None:
        super().__init__(directory, port=port, appendonly=False, extra_args=extra)
        self.extra_args = (*self.FAST_SYNC, *extra)

    def restart_with(self, *extra: str) -> None:
        self.stop()
        self.extra_args = (*self.FAST_SYNC, *extra)
        self.start()


# -- Sentinel ---------------------------------------------------------------------------


class SentinelSet:
    """One primary, its replicas and an odd number of sentinels watching them.

    Args:
        directory: where every process keeps its files.
        replicas: how many replicas the primary starts with.
        sentinels: how many sentinels (the quorum is a majority of them).
        down_after_ms: ``down-after-milliseconds``: how long the primary may be silent.
        failover_timeout_ms: ``failover-timeout``.
    """

    master = "cronrace"

    def __init__(
        self,
        directory: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 2000,
    ) -> None:
        self.directory = directory
        self.nodes = [DataNode(directory / "node0")]
        for index in range(1, replicas + 1):
            self.nodes.append(DataNode(directory / f"node{index}"))
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self._sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.master}"

    def start(self) -> SentinelSet:
        primary = self.nodes[0].start()
        for node in self.nodes[1:]:
            node.extra_args = (*node.FAST_SYNC, "--replicaof", "127.0.0.1", str(primary.port))
            node.start()
        for node in self.nodes[1:]:
            wait_until(lambda n=node: in_sync(n.port), timeout_s=10, what="replica in sync")
        for port in self.sentinel_ports:
            self._start_sentinel(port, primary.port)
        quorum_view = len(self.sentinel_ports) - 1
        for port in self.sentinel_ports:
            wait_until(
                lambda p=port: self._sees_everyone(p, quorum_view),
                timeout_s=15,
                what="sentinels to see the replicas and each other",
            )
        return self

    def _start_sentinel(self, port: int, primary_port: int) -> None:
        assert REDIS_SERVER is not None
        home = self.directory / f"sentinel{port}"
        home.mkdir(parents=True, exist_ok=True)
        quorum = len(self.sentinel_ports) // 2 + 1
        conf = home / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {home}\nlogfile {home / 'sentinel.log'}\n"
            f"sentinel monitor {self.master} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.master} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {self.master} 1\n"
        )
        process = subprocess.Popen(
            [REDIS_SERVER, str(conf), "--sentinel"], stdin=subprocess.DEVNULL
        )
        self._sentinels.append(process)
        wait_until(lambda: client(port).ping(), timeout_s=10, what="a sentinel to answer")

    def _sees_everyone(self, port: int, others: int) -> bool:
        """The sentinel knows its peers, and every replica is fit to be promoted."""
        state = client(port).sentinel_master(self.master)
        return (
            state["num-other-sentinels"] >= others and self._promotable(port) >= len(self.nodes) - 1
        )

    def promotable_everywhere(self) -> bool:
        """Every sentinel has a replica it would promote."""
        return all(self._promotable(port) >= 1 for port in self.sentinel_ports)

    def _promotable(self, port: int) -> int:
        # A sentinel promotes only a replica it has INFO from (else NOGOODSLAVE).
        return sum(
            1
            for replica in client(port).sentinel_slaves(self.master)
            if not replica["is_sdown"]
            and replica.get("role-reported") == "slave"
            and replica.get("master-link-status") == "ok"
            and 0 < int(replica.get("info-refresh", 0)) < 10_000
        )

    def sentinel(self) -> redis.Redis:
        return client(self.sentinel_ports[0])

    def primary_port(self) -> int:
        """The port the sentinels now call the primary's (as ``SENTINEL MASTERS`` says it,
        which redis-py reads, and which switches after ``get-master-addr-by-name``)."""
        return int(self.sentinel().sentinel_master(self.master)["port"])

    def node(self, port: int) -> DataNode:
        return next(node for node in self.nodes if node.port == port)

    def wait_for_new_primary(self, old_port: int, *, timeout_s: float = 20) -> int:
        """Wait until the sentinels name another primary and it answers as one."""

        def promoted() -> int | None:
            port = self.primary_port()
            if port == old_port:
                return None
            role = client(port).execute_command("ROLE")[0]
            return port if role == "master" else None

        return int(wait_until(promoted, timeout_s=timeout_s, what="a new primary"))

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: promote a replica although the primary is healthy."""
        self.sentinel().execute_command("SENTINEL", "FAILOVER", self.master)

    def wait_replicas_in_sync(self, primary_port: int, count: int, *, timeout_s: float) -> None:
        """Wait until ``count`` replicas follow ``primary_port`` with their link up."""

        def synced() -> bool:
            info = client(primary_port).info("replication")
            states = [info.get(f"slave{i}", {}) for i in range(int(info["connected_slaves"]))]
            return sum(1 for s in states if s.get("state") == "online") >= count

        wait_until(synced, timeout_s=timeout_s, what=f"{count} replicas of {primary_port}")

    def stop(self) -> None:
        for process in self._sentinels:
            if process.poll() is None:
                process.terminate()
        for process in self._sentinels:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for node in self.nodes:
            node.stop()


# -- Cluster ----------------------------------------------------------------------------


class ClusterSet:
    """A Redis Cluster: ``primaries`` shards with ``replicas`` replicas each.

    Args:
        directory: where every node keeps its files.
        primaries: how many shards (at least three: Cluster needs a majority to fail over).
        replicas: replicas per shard.
        node_timeout_ms: ``cluster-node-timeout``: how long a primary may be silent.
    """

    def __init__(
        self,
        directory: Path,
        *,
        primaries: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
    ) -> None:
        self.node_timeout_ms = node_timeout_ms
        self.replicas = replicas
        self.nodes = [
            DataNode(directory / f"node{index}", *self._args())
            for index in range(primaries * (1 + replicas))
        ]

    def _args(self) -> tuple[str, ...]:
        return (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            # The bus port defaults to port + 10000: may be taken, or above 65535.
            "--cluster-port",
            str(free_port()),
        )

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}"

    def start(self) -> ClusterSet:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli is not installed")
        for node in self.nodes:
            node.start()
        subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until(self.healthy, timeout_s=20, what="the cluster to be ok on every node")
        return self

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok`` and every replica is in sync."""
        for node in self.nodes:
            if node.process is None:
                continue
            if client(node.port).cluster("info")["cluster_state"] != "ok":
                return False
            if client(node.port).info("replication")["role"] == "slave" and not in_sync(node.port):
                return False
        return True

    def primary_of(self, key: str) -> DataNode:
        """The node that serves ``key``'s slot now."""
        primary = self.serving(key)
        if primary is None:
            raise AssertionError(f"no node serves {key!r}'s slot")
        return primary

    def serving(self, key: str) -> DataNode | None:
        """The node that serves ``key``'s slot, or None while a failover leaves the slot
        unlisted (CI on c3ef13a: a live node's ``CLUSTER SLOTS`` left slot 4599 out in
        the middle of a ``CLUSTER FAILOVER``; a condition polled during one uses this)."""
        live = next(node for node in self.nodes if node.process is not None)
        slot = int(client(live.port).cluster("keyslot", key))
        for start, end, primary, *_replicas in client(live.port).execute_command(
            "CLUSTER", "SLOTS"
        ):
            if int(start) <= slot <= int(end):
                return next(node for node in self.nodes if node.port == int(primary[1]))
        return None

    def replica_of(self, primary: DataNode) -> DataNode:
        """One node replicating ``primary``, once one is connected: on a loaded machine a
        replica's link drops and re-forms (CI on 0609090 found none listed, right after
        the cluster had been healthy)."""
        ports: list[int] = []

        def connected() -> bool:
            info = client(primary.port).info("replication")
            if "slave0" in info:
                ports.append(int(info["slave0"]["port"]))
            return bool(ports)

        wait_until(connected, timeout_s=20, what=f"a replica connected to {primary.port}")
        return next(node for node in self.nodes if node.port == ports[0])

    def add_node(self, directory: Path) -> DataNode:
        """Start an empty node and ``CLUSTER MEET`` it; return once every node knows it.

        It joins as a primary with no slot (what a managed cluster scaling out adds).
        """
        node = DataNode(directory, *self._args())
        node.start()
        self.nodes.append(node)
        bus_port = node.extra_args[node.extra_args.index("--cluster-port") + 1]
        live = [n for n in self.nodes if n.process is not None]
        client(live[0].port).execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus_port)

        def everyone_knows() -> bool:
            return all(
                int(client(n.port).cluster("info")["cluster_known_nodes"]) == len(live)
                for n in live
            )

        wait_until(everyone_knows, timeout_s=20, what="every node to know the new node")
        wait_until(self.healthy, timeout_s=20, what="the cluster to be ok on every node")
        return node

    def primaries(self) -> list[DataNode]:
        return [
            node
            for node in self.nodes
            if node.process is not None and client(node.port).execute_command("ROLE")[0] == "master"
        ]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
