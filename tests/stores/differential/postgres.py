"""The PostgreSQL spelling of one job's reference state (``codec.StateCodec``).

A :class:`~cronrace.protocol.JobState` is the job's row of ``jobs`` (the cursor and its
origin, the fence counter, the lease with its ticks, the run mirror, the queued tick, the
pause flag, the wipe hold, the outstanding triggers), its rows of ``claims`` (a tick's
claim is ``(tick, '')``, a trigger's ``(0, id)``; a decided one keeps its answer in
``memo``, as ``decide()`` writes it) and its rows of ``runs`` (RunRecord JSON, oldest
first). Times in the rows are microseconds: a reference time in milliseconds is written
as ``ms * 1000`` and read back as ``us // 1000``.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
from psycopg.types.json import Jsonb

from cronrace.model.records import RunRecord
from cronrace.protocol import Claim, DecideReply, JobState, Lease, Pending, Record, trigger_key
from cronrace.protocol.values import ClaimKey
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.queries import bind_schema
from cronrace.stores.postgres.replies import decode_decide
from cronrace.stores.values import reference_record

_JOB_COLUMNS = (
    "cursor_tick, origin_tick, fence, lease_owner, lease_fence, lease_ticks, lease_trigger, "
    "lease_expires_us, lease_held, lease_reasserted, run_owner, run_fence, run_ticks, "
    "run_trigger, pending_tick, pending_trigger, paused, hold_until_us, hold_fence, outstanding"
)


def memo_json(memo: DecideReply) -> dict[str, Any]:
    """A remembered answer as ``decide()`` keeps it under its claim (no records)."""
    return {
        "answer": str(memo.answer),
        "cursor": memo.cursor_s,
        "verdict": None if memo.verdict is None else str(memo.verdict),
        "fence": memo.fence,
        "fences": list(memo.fences),
        "ticks": list(memo.ticks_s),
        "hold_ms": memo.hold_ms,
        "data_lost": memo.data_lost,
    }


def record_json(job: str, record: Record) -> dict[str, Any]:
    """A history entry as the readers expect it (model/records.py)."""
    run = RunRecord(
        job,
        record.tick_s,
        record.node,
        record.outcome,
        fence=record.fence,
        count=record.count,
        trigger_id=record.trigger_id,
        last_tick_s=record.last_s,
    )
    data: dict[str, Any] = orjson.loads(run.to_json())
    return data


def _claim_row(key: ClaimKey) -> tuple[int, str]:
    if isinstance(key, int):
        return key, ""
    return 0, key.removeprefix("trigger:")


class PostgresCodec:
    """Writes and reads one job's state in a store's namespace, as the test's superuser."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.ns = store.ns
        self.schema = store.db.target.schema
        self.conninfo = store.db.target.conninfo
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        return self._conn

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _run(self, text: str, **params: Any) -> list[tuple[Any, ...]]:
        conn = await self._connection()
        cursor = await conn.execute(
            bind_schema(text, self.schema).encode(), {"ns": self.ns, **params}
        )
        return list(await cursor.fetchall()) if cursor.description else []

    async def now_us(self) -> int:
        """The store's clock (``now_us()``)."""
        return int((await self._run("SELECT @schema@.now_us()"))[0][0])

    async def load(self, job: str, state: JobState, now_ms: int) -> None:
        """Write ``state`` as ``job``'s rows; what has run out by ``now_ms`` is not written."""
        lease = state.live_lease(now_ms)
        run = state.run
        hold_us = state.hold_until_ms * 1000 if state.hold_until_ms > now_ms else None
        job_row = (
            state.cursor_s,
            state.origin_s,
            state.fence,
            *_lease_columns(lease),
            None if lease is None else lease.expires_ms * 1000,
            lease is not None and lease.held,
            lease is not None and lease.reasserted,
            *_lease_columns(run),
            None if state.pending is None else state.pending.tick_s,
            None if state.pending is None else state.pending.trigger_id,
            state.paused,
            hold_us,
            state.hold_fence if hold_us is not None else 0,
            Jsonb([[trigger, at] for trigger, at in state.triggers]),
            None if lease is None else lease.ticks_s[0],
            None if run is None else run.ticks_s[0],
        )
        claims = [
            (*_claim_row(key), claim.owner, claim.expires_ms * 1000)
            + (("decide", Jsonb(memo_json(claim.memo))) if claim.memo else (None, None))
            for key, claim in state.claims
            if claim.expires_ms > now_ms
        ]
        history = [Jsonb(record_json(job, record)) for record in state.history]
        conn = await self._connection()
        async with conn.transaction():
            for table in ("jobs", "claims", "runs"):
                await conn.execute(
                    self._bound(f"DELETE FROM @schema@.{table} WHERE ns = %s AND job = %s"),  # noqa: S608
                    (self.ns, job),
                )
            marks = ", ".join(["%s"] * (2 + len(job_row)))
            columns = f"ns, job, {_JOB_COLUMNS}, lease_tick, run_tick"
            insert = f"INSERT INTO @schema@.jobs ({columns}) VALUES ({marks})"  # noqa: S608
            await conn.execute(
                self._bound(insert),
                (self.ns, job, *job_row),
            )
            for claim_row in claims:
                await conn.execute(
                    self._bound(
                        "INSERT INTO @schema@.claims (ns, job, tick, trigger_id, owner, "
                        "expires_us, request_id, memo) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                    ),
                    (self.ns, job, *claim_row),
                )
            for entry in history:
                await conn.execute(
                    self._bound(
                        "INSERT INTO @schema@.runs (ns, job, written_ms, record) "
                        "VALUES (%s, %s, %s, %s)"
                    ),
                    (self.ns, job, now_ms, entry),
                )

    def _bound(self, text: str) -> bytes:
        return bind_schema(text, self.schema).encode()

    async def read(self, job: str) -> JobState:
        """``job``'s rows as a reference state; what has run out is absent."""
        now_us = await self.now_us()
        now_ms = now_us // 1000
        rows = await self._run(
            f"SELECT {_JOB_COLUMNS} FROM @schema@.jobs WHERE ns = %(ns)s AND job = %(job)s",  # noqa: S608
            job=job,
        )
        claims = await self._run(
            "SELECT tick, trigger_id, owner, expires_us, memo FROM @schema@.claims "
            "WHERE ns = %(ns)s AND job = %(job)s AND expires_us > %(now)s",
            job=job,
            now=now_us,
        )
        history = await self._run(
            "SELECT record::text FROM @schema@.runs WHERE ns = %(ns)s AND job = %(job)s "
            "ORDER BY id",
            job=job,
        )
        found: list[tuple[ClaimKey, Claim]] = []
        for tick, trigger, owner, expires_us, memo in claims:
            key: ClaimKey = int(tick) if not trigger else trigger_key(str(trigger))
            decided = None if memo is None else decode_decide(memo)
            found.append((key, Claim(str(owner), int(expires_us) // 1000, decided)))
        state = JobState(
            claims=tuple(sorted(found, key=lambda kc: str(kc[0]))),
            history=tuple(reference_record(RunRecord.from_json(text)) for (text,) in history),
        )
        if not rows:
            return state
        (
            cursor,
            origin,
            fence,
            lease_owner,
            lease_fence,
            lease_ticks,
            lease_trigger,
            lease_expires_us,
            held,
            reasserted,
            run_owner,
            run_fence,
            run_ticks,
            run_trigger,
            pending_tick,
            pending_trigger,
            paused,
            hold_until_us,
            hold_fence,
            outstanding,
        ) = rows[0]
        lease = None
        if lease_fence is not None and lease_expires_us is not None and lease_expires_us > now_us:
            lease = Lease(
                str(lease_owner),
                int(lease_fence),
                tuple(int(t) for t in lease_ticks or ()),
                lease_trigger,
                int(lease_expires_us) // 1000,
                held=bool(held),
                reasserted=bool(reasserted),
            )
        run = None
        if run_fence is not None:
            run = Lease(
                str(run_owner), int(run_fence), tuple(int(t) for t in run_ticks or ()), run_trigger
            )
        hold_ms = int(hold_until_us or 0) // 1000
        return JobState(
            cursor_s=cursor,
            origin_s=origin,
            fence=fence,
            lease=lease,
            run=run,
            pending=None if pending_tick is None else Pending(int(pending_tick), pending_trigger),
            paused=bool(paused),
            hold_until_ms=hold_ms if hold_ms > now_ms else 0,
            hold_fence=int(hold_fence) if hold_ms > now_ms else 0,
            claims=state.claims,
            triggers=tuple((str(trigger), int(at)) for trigger, at in outstanding),
            history=state.history,
        )


def _lease_columns(lease: Lease | None) -> tuple[Any, ...]:
    """owner, fence, ticks, trigger of a lease or a run."""
    if lease is None:
        return (None, None, None, None)
    return (lease.owner, lease.fence, list(lease.ticks_s), lease.trigger_id)
