"""The state every part of :class:`~cronrace.stores.redis.Store` shares: client, keys, scripts.

Also what this node has seen of each job's fences (its evidence that a job whose counter
is missing was wiped, not new), and the pipelined commands that move garbage aside.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Self

from redis.asyncio.cluster import RedisCluster

from cronrace.errors import StoreError, StoreSchemaError
from cronrace.model.versions import PROTOCOL_VERSION
from cronrace.stores import contract
from cronrace.stores.redis.access import AccessWatch
from cronrace.stores.redis.client import is_embedded, make_client
from cronrace.stores.redis.errors import RAW_FAILURES, translating
from cronrace.stores.redis.fleet import FleetCommands
from cronrace.stores.redis.garbage import Command, send_repairing
from cronrace.stores.redis.keys import Keys
from cronrace.stores.redis.schedules import ScheduleCommands
from cronrace.stores.redis.scripts import Scripts
from cronrace.stores.redis.sentinel import follow_switch_master
from cronrace.stores.values import Claim, Owner

log = logging.getLogger("cronrace.stores.redis")

#: What reading INFO may meet: refused by the ACL or renamed away by a managed service.
_INFO_FAILURES: tuple[type[BaseException], ...] = (*RAW_FAILURES, StoreError)

#: The namespace-wide keys and the type each holds.
NAMESPACE_KEY_TYPES = {
    "jobs": "set",
    "specs": "hash",
    "nodes": "zset",
    "epoch": "string",
    "asserted": "hash",
    "control": "stream",
    "fleet_log": "stream",
}


@translating
class StoreBase(contract.Store):
    """Redis access of one namespace: the client, the key spelling, the scripts."""

    def __init__(self, client: Any, namespace: str = "cronrace") -> None:
        self.client = client
        self.keys = Keys(namespace)
        self.scripts = Scripts(client)
        self.schedules = ScheduleCommands(client, self.keys, self.scripts)
        self.fleet = FleetCommands(client, self.keys)
        self._fences_seen: dict[str, int] = {}
        #: The last owner a release named, and its ``<node_id>:<nonce>`` (one per agent).
        self._owner_spelled: tuple[Owner | None, str] = (None, "")
        # job -> (a claim this node lost while the job's counter was not there yet, the
        # monotonic instant that claim expires): its witness that Redis lost the job's
        # data, should the claim vanish before its TTL (see ``Store.claim_each``).
        self._lost_unseen: dict[str, tuple[str, float]] = {}
        # What Redis refused (wrong password, NOPERM, TLS); the embedded store refuses nothing.
        watch = getattr(client, "access", None)
        self.access: AccessWatch = watch if isinstance(watch, AccessWatch) else AccessWatch()

    def _claim_key(self, claim: Claim) -> str:
        if claim.trigger_id is not None:
            return self.keys.trigger_claim(claim.job, claim.trigger_id)
        return self.keys.claim(claim.job, claim.tick_s)

    @classmethod
    def from_url(cls, url: str, namespace: str = "cronrace", **client_options: Any) -> Self:
        """Connect lazily to ``url``; nothing is sent until the first command."""
        return cls(make_client(url, **client_options), namespace)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.client.aclose()

    # -- scripts ---------------------------------------------------------------------

    async def load_scripts(self) -> None:
        """Load every Lua script into the server's script cache."""
        await self.scripts.load()

    async def prepare(self) -> None:
        """Load the scripts: a running node calls them from its first wake-up on.

        Also checks the namespace's protocol version (:meth:`check_protocol`) and says
        loudly when Redis may evict keys (see :meth:`check_eviction`).

        Raises:
            StoreSchemaError: the namespace runs another protocol version.
        """
        await self.check_protocol()
        await self.load_scripts()
        await self.check_eviction()

    async def check_protocol(self) -> None:
        """Record the protocol version this namespace runs, or refuse another one.

        Nodes of two protocol versions must not race in one namespace: they would decide
        the same ticks by different rules. The first node writes ``<ns>:protocol``
        (``SET NX``). A namespace without it but with live nodes (its epoch written, members
        in the node set) is served by agents of protocol 1 (the watermark), which never
        wrote one: refused until they are all stopped (then it is taken over as it is, its
        jobs deciding from their next tick on), or use another namespace.
        """
        key = self.keys.protocol
        raw = await self.client.get(key)
        if raw is None:
            seconds, micros = await self.client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            live = await self.client.zcount(self.keys.nodes, now_ms, "+inf")
            if live and await self.client.exists(self.keys.epoch):
                raise StoreSchemaError(
                    f"the namespace {self.keys.ns!r} is served by {live} live agent(s) of an "
                    f"older cronrace (protocol 1, the watermark), and this one speaks protocol "
                    f"{PROTOCOL_VERSION}: stop every older agent first, or give this fleet "
                    "another namespace (docs/how-to/upgrading.md)"
                )
            await self.client.set(key, PROTOCOL_VERSION, nx=True)
            raw = await self.client.get(key)
        found = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        if found != str(PROTOCOL_VERSION):
            raise StoreSchemaError(
                f"the namespace {self.keys.ns!r} runs cronrace protocol {found[:20]!r} and "
                f"this agent speaks protocol {PROTOCOL_VERSION}: run one version per "
                "namespace (stop the others first, or use another namespace; "
                "docs/how-to/upgrading.md)"
            )

    async def follow_failovers(self) -> None:
        """Follow Sentinel's announcements of a new primary until cancelled (see
        :func:`~cronrace.stores.redis.sentinel.follow_switch_master`); returns at once on
        every other deployment."""
        await follow_switch_master(self.client)

    async def check_eviction(self) -> str | None:
        """Log an ERROR when Redis may evict keys; return the eviction policy found.

        A Redis with ``maxmemory`` and an evicting policy (``allkeys-*``, ``volatile-*``:
        every claim, lease and hold has an expiry) drops claims, leases, cursors and
        fences when it fills up: ticks fire twice, runs overlap. Read from ``INFO memory``
        (on every primary of a cluster); where the ACL or the service refuses it, one
        WARNING says how to check by hand. Returns None when nothing could be read. The
        embedded store lives in this process's memory, has no ``maxmemory`` and evicts
        nothing: it is not asked (it knows no ``INFO``, and a newcomer's first run would
        start with a WARNING about it).
        """
        if is_embedded(self.client):
            return "noeviction"
        try:
            if isinstance(self.client, RedisCluster):
                found = await self.client.info("memory", target_nodes=RedisCluster.PRIMARIES)
                infos = list(found.values()) if _per_node(found) else [found]
            else:
                infos = [await self.client.info("memory")]
        except _INFO_FAILURES as exc:
            self.access.went_through([("info", "memory")])  # not a refusal of our work
            log.warning(
                "cannot tell whether Redis may evict keys (INFO memory refused); check "
                "that CONFIG GET maxmemory-policy says noeviction, or maxmemory says 0",
                extra={"error": str(exc)},
            )
            return None
        policies = {str(info.get("maxmemory_policy", "noeviction")) for info in infos}
        limited = any(int(info.get("maxmemory", 0) or 0) > 0 for info in infos)
        evicting = sorted(p for p in policies if p != "noeviction")
        if limited and evicting:
            log.error(
                "Redis may EVICT keys: maxmemory is set with an evicting policy, so a full "
                "Redis drops claims, leases, cursors and fences (ticks may fire twice, "
                "runs overlap); set maxmemory-policy noeviction (cronrace then reports "
                "writes refused for memory) or maxmemory 0",
                extra={"maxmemory_policy": ",".join(evicting)},
            )
        return ",".join(sorted(policies))

    async def _eval(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self.scripts.eval(name, keys, args)

    def _command(self, job: str, kind: str, method: str, *args: Any, **kwargs: Any) -> Command:
        """A pipelined command on the ``kind`` key of ``job`` (runs, state, triggers) or of the
        namespace (jobs, nodes, epoch, control: ``job`` is then ignored)."""
        if kind in NAMESPACE_KEY_TYPES:
            key = getattr(self.keys, kind)
            prefix = self.keys.quarantine_of(key)
            return Command(method, key, args, kwargs, NAMESPACE_KEY_TYPES[kind], kind, prefix)
        key, key_type = {
            "runs": (self.keys.runs(job), "stream"),
            "state": (self.keys.state(job), "hash"),
            "triggers": (self.keys.triggers(job), "hash"),
        }[kind]
        return Command(method, key, args, kwargs, key_type, kind, self.keys.quarantine(job))

    async def _pipeline_repairing(
        self, commands: Sequence[Command], *, time_first: bool = False, tail: Sequence[Command] = ()
    ) -> list[Any]:
        return await send_repairing(
            self.client, self.scripts, commands, time_first=time_first, tail=tail
        )

    # -- what this node has seen of each job's fences -----------------------------------

    def known_fence(self, job: str) -> int:
        """The highest fence this store has seen for ``job`` (0: none).

        Sent with every acquire: a fence counter missing although a fence is known means
        Redis lost the job's data, not that the job is new (README, "A wiped Redis").
        Only a fence seen counts: in an acquire's or a release's answer, in the counter
        read at start-up or with a claim. A lost claim alone is none (its winner's
        acquire may not have reached Redis yet, or the winner died); the heartbeat's
        epoch check is the second line.
        """
        return self._fences_seen.get(job, 0)

    def _saw_fence(self, job: str, *fences: int) -> None:
        highest = max(fences, default=0)
        if highest > self._fences_seen.get(job, 0):
            self._fences_seen[job] = highest


def _per_node(found: Any) -> bool:
    """Whether a cluster's INFO reply is one dict per node (several primaries answered)."""
    return isinstance(found, dict) and all(isinstance(v, dict) for v in found.values())
