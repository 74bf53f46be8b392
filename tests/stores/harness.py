"""What the store behaviour suite needs from a backend besides its store: a test harness.

The contract suite (``tests/stores/contract/``) calls nothing but the methods of
:class:`cronrace.stores.contract.Store`. Some behaviour can only be shown after something
happened to the data that no store call does: a lease ran out, a restart without
persistence erased a job, a failover promoted a replica behind its primary. Each backend
spells those faults for its own storage (:class:`Faults`), and says how many round trips a
batch may cost on it (:attr:`Backend.shards`, :meth:`Backend.round_trips`).

A new backend runs the suite by implementing :class:`Deployment` (one per test session:
its server, its connections) and :class:`Backend` (one per test: a namespace of its own),
and adding one param to ``tests/stores/contract/conftest.py``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, Owner

#: The parts of a job's data a wipe erases (:meth:`Faults.wipe`).
JOB_PARTS = ("lease", "fence", "cursor", "state", "pending")


@dataclass
class RoundTrips:
    """How many requests a store sent to its backend while counted (each waits for a reply)."""

    count: int = 0


class Faults(Protocol):
    """What happens to a backend's data besides the store's calls, spelled by each backend."""

    async def expire_lease(self, job: str) -> None:
        """Let ``job``'s running lease run out, as when its holder stopped renewing it."""

    async def age_lease(self, job: str, left_ms: int) -> None:
        """Let time pass since the lease was granted or renewed: ``left_ms`` remain."""

    async def end_hold(self, job: str) -> None:
        """Let ``job``'s wipe hold run out (it lasts one ``lease_ttl``)."""

    async def wipe(self, job: str, *parts: str) -> None:
        """Erase ``job``'s data as a restart without persistence does.

        Args:
            job: the job.
            parts: some of :data:`JOB_PARTS` (lease, fence counter, cursor with its
                origin, state with the pause flag, the run, the counters and the
                outstanding triggers, queued tick); all when empty.
                Claims and run records are kept: the tests that use this wipe one job's
                data, not a whole server.
        """

    async def set_fence_counter(self, job: str, value: int) -> None:
        """Leave ``job``'s fence counter at ``value``, as a replica promoted while behind."""

    async def forget_answer(self, claim: Claim, owner: Owner) -> None:
        """Drop the answer a decision remembered under ``claim``; ``owner`` still holds it."""

    async def expire_claim(self, claim: Claim) -> None:
        """Let ``claim`` run out, its answer with it (its winner frozen past its TTL)."""

    async def age_claim(self, claim: Claim, left_ms: int) -> None:
        """Let time pass since ``claim`` was won: ``left_ms`` of its lifetime remain."""

    async def wipe_schedules(self) -> None:
        """Erase the stored schedules (their set and version), as a wipe does."""


class Backend(Protocol):
    """One test's namespace on a deployment: stores for its nodes, and its faults.

    Attributes:
        name: the deployment's name (the test id's param).
        shards: how many servers a batch of one call may be split across; a call that
            sends a batch costs at most this many round trips, one per server, in parallel.
        faults: what the tests may do to the data besides calling the store.
    """

    name: str
    shards: int
    faults: Faults

    async def node(self) -> Store:
        """A store for one more node on this namespace, with its own evidence of fences."""
        ...

    def round_trips(self) -> AbstractAsyncContextManager[RoundTrips]:
        """Count the round trips that every store of this namespace makes inside the block."""
        ...


class Deployment(Protocol):
    """A backend's servers and connections, opened once per test session (per worker)."""

    name: str

    def backend(self, namespace: str) -> AbstractAsyncContextManager[Backend]:
        """A namespace of this deployment for one test; what it opened is closed after."""
        ...
