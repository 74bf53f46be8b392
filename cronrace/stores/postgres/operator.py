"""What operators read and control on PostgreSQL: nodes, job states, history, pause,
manual triggers and the control notices every node reads.

The shared state of :class:`~cronrace.stores.postgres.PostgresStore` lives here too: the
database, the namespace, and what this store object has seen of each job's fences.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

import anyio

from cronrace.model.records import NodeInfo, RunRecord
from cronrace.stores.contract import FleetStore, Refusals, ScheduleStore
from cronrace.stores.postgres.database import Database
from cronrace.stores.postgres.errors import translating
from cronrace.stores.postgres.listen import Listener
from cronrace.stores.postgres.replies import decode_job_state, decode_records
from cronrace.stores.postgres.tables import FleetTable, ScheduleTable
from cronrace.stores.values import JobState

log = logging.getLogger("cronrace.stores.postgres")

#: At most this many control notices are read at once.
CONTROL_BATCH = 100


@translating
class OperatorSide:
    """The operator side of the PostgreSQL store, and the state every part shares."""

    schedules: ScheduleStore
    fleet: FleetStore
    access: Refusals

    def __init__(self, db: Database, namespace: str = "cronrace") -> None:
        self.db = db
        self.ns = namespace
        self.schedules = ScheduleTable(db, namespace)
        self.fleet = FleetTable(db, namespace)
        self.access = db.access
        self._fences_seen: dict[str, int] = {}
        # job -> (the tick of a claim this node lost while the job had no counter yet, the
        # monotonic instant until which that claim must exist): see PostgresStore.claim_each.
        self._lost_unseen: dict[str, tuple[int, float]] = {}
        #: Wakes read_control at a NOTIFY of a new notice, where LISTEN works (listen.py).
        self.listener = Listener(db, namespace)

    # -- what this node has seen of each job's fences -----------------------------------

    def known_fence(self, job: str) -> int:
        """The highest fence this store has seen for ``job`` (0: none; 1: only a lost claim).

        Sent with every acquire: a fence counter missing although a fence is known means
        the database lost the job's row, not that the job is new.
        """
        return self._fences_seen.get(job, 0)

    def _saw_fence(self, job: str, *fences: int) -> None:
        highest = max(fences, default=0)
        if highest > self._fences_seen.get(job, 0):
            self._fences_seen[job] = highest

    # -- reads ---------------------------------------------------------------------------

    async def nodes(self, *, heartbeat_ttl_ms: int) -> list[NodeInfo]:
        """List live nodes, newest heartbeat first."""
        rows = await self.db.rows("nodes", {"ns": self.ns})
        out = [
            NodeInfo(
                node_id=str(node),
                expires_ms=int(expires),
                last_seen_ms=int(expires) - heartbeat_ttl_ms,
            )
            for node, expires in rows
        ]
        return sorted(out, key=lambda node: node.last_seen_ms, reverse=True)

    async def known_jobs(self) -> list[str]:
        """Every job any node of this namespace has registered."""
        return [str(job) for (job,) in await self.db.rows("known_jobs", {"ns": self.ns})]

    async def job_states(self, jobs: Sequence[str]) -> list[JobState]:
        """Read what the database knows of each job, in one statement."""
        rows = await self.db.rows("job_states", {"ns": self.ns, "jobs": list(jobs)})
        found = {str(row[0]): decode_job_state(row) for row in rows}
        states = [found.get(job) or JobState(job, None, None, False, {}, {}, None) for job in jobs]
        for state in states:
            lease_fence = state.lease.fence if state.lease else 0
            self._saw_fence(state.job, state.last_fence or 0, lease_fence)
        return states

    async def history(self, job: str, limit: int) -> list[RunRecord]:
        """Return the newest ``limit`` run records of ``job``, newest first."""
        return (await self.histories([job], limit))[job]

    async def histories(self, jobs: Sequence[str], limit: int) -> dict[str, list[RunRecord]]:
        """Return the newest ``limit`` run records of each job, newest first; one statement."""
        if not jobs:
            return {}
        rows = await self.db.rows(
            "history", {"ns": self.ns, "jobs": list(jobs), "limit": max(0, limit)}
        )
        by_job: dict[str, list[Any]] = {job: [] for job in jobs}
        for job, record_id, written_ms, text in rows:
            by_job.setdefault(str(job), []).append((record_id, written_ms, text))
        return {job: decode_records(job, by_job.get(job, [])) for job in jobs}

    # -- controls ------------------------------------------------------------------------

    async def set_paused(self, job: str, paused: bool) -> None:
        """Pause or resume a job for every node (``acquire()`` reads the flag)."""
        await self.db.rows("set_paused", {"ns": self.ns, "job": job, "paused": paused})

    async def request_trigger(self, job: str) -> str:
        """Ask every node to race for one immediate run of ``job``; return its id.

        The trigger is outstanding in the job's row until a decision takes it (or sweeps it
        past its window), and its notice is posted, in one transaction (post_trigger()).
        """
        trigger_id = secrets.token_hex(8)
        await self.db.value("post_trigger", {"ns": self.ns, "job": job, "id": trigger_id})
        return trigger_id

    async def trigger_claimant(self, job: str, trigger_id: str) -> str | None:
        """Return the node that claimed a manual trigger, or None while nobody has."""
        owner = await self.db.value(
            "trigger_claimant", {"ns": self.ns, "job": job, "trigger_id": trigger_id}
        )
        return None if owner is None else str(owner).partition(":")[0]

    async def control_position(self) -> str:
        """The id after which new control notices will appear, ``<now_ms>-<last id>``."""
        now_ms, last_id = await self.db.row("control_position", {"ns": self.ns}) or (0, 0)
        return f"{int(now_ms)}-{int(last_id)}"

    async def read_control(
        self, after_id: str, *, block_ms: int
    ) -> list[tuple[str, dict[str, str]]]:
        """Control notices newer than ``after_id``, waiting up to ``block_ms`` for one.

        Where ``LISTEN`` works, the table is read again at a notification of a new notice
        (or at the end of the wait); elsewhere (a transaction-mode pooler) it is polled
        every ``poll_ms`` (the URL's option), on pooled connections (listen.py).
        """
        after = _position_id(after_id)
        deadline = anyio.current_time() + block_ms / 1000
        while True:
            rows = await self.db.rows(
                "read_control", {"ns": self.ns, "after_id": after, "limit": CONTROL_BATCH}
            )
            if rows or anyio.current_time() >= deadline:
                break
            await self.listener.wait(max(0.0, deadline - anyio.current_time()))
        out: list[tuple[str, dict[str, str]]] = []
        for entry_id, posted_ms, fields in rows:
            data = fields if isinstance(fields, dict) else {}
            out.append((f"{int(posted_ms)}-{int(entry_id)}", {k: str(v) for k, v in data.items()}))
        return out


def _position_id(position: str) -> int:
    """The notice id part of a position ``<ms>-<id>`` (0 when it has none)."""
    _ms, _, entry = position.partition("-")
    return int(entry) if entry.isdigit() else 0
