"""The dense cursor's functions as PostgreSQL holds them (functions/decide.sql, runs.sql).

What only this store shows, beside the differential tests (each call held to the reference
one job at a time) and the behaviour suite: a batch around a row another session holds,
garbage an operator left in a job's row, the records as the history readers read them,
the claims a prune may delete, and the README's grants being enough.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import psycopg
import pytest

from cronrace.errors import JobBusyError
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import (
    Answer,
    DecideReply,
    DecideRequest,
    Missed,
    Release,
    Renewal,
    RenewRequest,
    Verdict,
)
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.queries import bind_schema
from cronrace.stores.values import Owner, RunEnd
from tests.fleet.test_postgres_fleet import readme_grants
from tests.postgres_server import PostgresServer
from tests.stores.postgres.conftest import job_row, sql

pytestmark = pytest.mark.postgres

OWNER = Owner("n1", "x")
#: Far beyond any test: garbage that would otherwise run out stays.
FOREVER_US = 10 * 365 * 24 * 3600 * 1_000_000


def decision(
    job: str,
    tick_s: int,
    cursor_s: int | None = None,
    *,
    fire: tuple[int, ...] | None = None,
    missed: tuple[Missed, ...] = (),
    from_s: int | None = None,
) -> DecideRequest:
    """The decision of ``tick_s`` (from ``cursor_s``, or ``from_s``: the tick before)."""
    if from_s is None:
        from_s = tick_s - 60 if cursor_s is None else cursor_s
    return DecideRequest(
        job, tick_s, cursor_s, from_s, (tick_s,) if fire is None else fire, missed,
        str(OWNER), Overlap.SKIP, 5000, 60_000,
    )  # fmt: skip


async def decide(store: PostgresStore, request: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([request])
    assert isinstance(reply, DecideReply), reply
    return reply


async def test_a_row_another_session_holds_costs_its_job_only(pg_store: PostgresStore) -> None:
    await decide(pg_store, decision("busy", 600))
    query = bind_schema(
        "SELECT 1 FROM @schema@.jobs WHERE ns = %s AND job = 'busy' FOR UPDATE",
        pg_store.db.target.schema,
    )
    async with await psycopg.AsyncConnection.connect(pg_store.db.target.conninfo) as holder:
        await holder.execute(query.encode(), (pg_store.ns,))  # its transaction stays open
        busy, free = await pg_store.decide([decision("busy", 660, 600), decision("free", 600)])
        await holder.rollback()
    assert isinstance(busy, JobBusyError)
    assert "busy" in str(busy)
    assert isinstance(free, DecideReply)
    assert free.answer is Answer.DECIDED
    assert await pg_store.cursors(["busy", "free"]) == {"busy": 600, "free": 600}


async def test_a_decisions_records_are_the_history_readers_run_records(
    pg_store: PostgresStore,
) -> None:
    """Appended in the decision, in order, as RunRecord JSON: a range's count and last tick,
    a grant's fence, when it was decided; the operator reads see the cursor and the lease."""
    reply = await decide(
        pg_store,
        decision("j", 900, fire=(840, 900), missed=(Missed(660, 780, 3),), from_s=600),
    )
    assert reply.verdict is Verdict.RUN
    history = list(reversed(await pg_store.history("j", 10)))
    assert [(r.tick_s, r.outcome, r.count, r.last_tick_s) for r in history] == [
        (660, Outcome.MISSED, 3, 780),
        (840, Outcome.GRANTED, 1, 0),
        (900, Outcome.GRANTED, 1, 0),
    ]
    assert [r.fence for r in history] == [0, reply.fence, reply.fence]
    assert all(r.job == "j" and r.node == "n1" and r.finished_ms > 0 for r in history)
    (state,) = await pg_store.job_states(["j"])
    assert state.cursor_s == 900
    assert state.lease is not None
    assert (state.lease.fence, state.lease.tick_s) == (reply.fence, 840)
    # The run of 840 ends; the lease goes on to 900 with a new fence.
    record = RunRecord("j", 840, "n1", Outcome.OK, reply.fence, 1, 2, detail={"rows": 3})
    ended = await pg_store.end_run(RunEnd("j", reply.fence, OWNER, 5000, record, 10))
    assert ended.decision is Release.HANDED_ON
    assert (ended.tick_s, ended.fence > reply.fence) == (900, True)
    newest = (await pg_store.history("j", 1))[0]
    assert newest == record
    assert newest.detail == {"rows": 3}


#: Garbage an operator's edit can leave in a job's row (the column types allow nothing
#: else): the SQL that puts it there, and the kind reported.
ROW_GARBAGE = {
    "lease": (
        "lease_owner = 'garbage ☠', lease_fence = -1, lease_ticks = NULL, "
        "lease_expires_us = @schema@.now_us() + %(forever)s",
        "lease",
    ),
    "lease-without-ticks": (
        "lease_owner = 'n9:z', lease_fence = 7, lease_ticks = '{}', "
        "lease_expires_us = @schema@.now_us() + %(forever)s",
        "lease",
    ),
    "run": ("run_owner = 'garbage ☠', run_fence = -1, run_ticks = '{-1}'", "run"),
    "fence": ("fence = -1", "fence"),
    "cursor": ("cursor_tick = -1", "cursor_tick"),
    "pending": ("pending_tick = -1, pending_trigger = 'garbage ☠'", "pending"),
    "outstanding": ("outstanding = '\"garbage ☠\"'", "outstanding"),
    "outstanding-pair": ('outstanding = \'[["t1", "x"]]\'', "outstanding"),
}


@pytest.mark.parametrize("name", sorted(ROW_GARBAGE))
async def test_garbage_in_a_jobs_row_is_moved_aside_reported_and_the_tick_decided(
    pg_store: PostgresStore, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    update, kind = ROW_GARBAGE[name]
    await sql(pg_store, "INSERT INTO @schema@.jobs (ns, job) VALUES (%(ns)s, 'j')")
    await sql(
        pg_store,
        f"UPDATE @schema@.jobs SET {update} WHERE ns = %(ns)s AND job = 'j'",  # noqa: S608
        forever=FOREVER_US,
    )
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.postgres"):
        reply = await decide(pg_store, decision("j", 600))
    assert reply.answer is Answer.DECIDED
    assert reply.verdict is Verdict.RUN
    # A lease nobody can tell was held holds new grants, as after a wipe.
    assert (reply.hold_ms > 0) == (kind == "lease")
    assert await pg_store.cursors(["j"]) == {"j": 600}
    kept = await sql(pg_store, "SELECT kind FROM @schema@.quarantine WHERE ns = %(ns)s")
    assert kept == [(kind,)]
    assert [getattr(r, "kind", None) for r in caplog.records] == [kind]
    # The job goes on: the next call meets a clean row.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="cronrace.stores.postgres"):
        assert await pg_store.renew_lease("j", RenewRequest(reply.fence, 5000)) is Renewal.RENEWED
    assert not caplog.records


async def test_garbage_a_run_meets_at_its_end_is_moved_aside_and_the_run_ends(
    pg_store: PostgresStore,
) -> None:
    granted = await decide(pg_store, decision("j", 600))
    await sql(
        pg_store,
        "UPDATE @schema@.jobs SET outstanding = '7', pending_tick = -1 "
        "WHERE ns = %(ns)s AND job = 'j'",
    )
    ended = await pg_store.end_run(RunEnd("j", granted.fence, OWNER, 5000, None, 10))
    assert ended.decision is Release.RELEASED
    kept = await sql(pg_store, "SELECT kind FROM @schema@.quarantine WHERE ns = %(ns)s ORDER BY 1")
    assert kept == [("outstanding",), ("pending",)]


async def test_a_remembered_answer_no_decide_wrote_is_moved_aside_and_the_tick_decided(
    pg_store: PostgresStore,
) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.claims (ns, job, tick, owner, expires_us, request_id, memo) "
        "VALUES (%(ns)s, 'j', 600, %(owner)s, @schema@.now_us() + %(forever)s, 'x', "
        "'\"garbage ☠\"')",
        owner=str(OWNER),
        forever=FOREVER_US,
    )
    reply = await decide(pg_store, decision("j", 600))
    assert (reply.answer, reply.replayed) == (Answer.DECIDED, False)
    assert await sql(pg_store, "SELECT kind FROM @schema@.quarantine WHERE ns = %(ns)s") == [
        ("claim",)
    ]
    again = await decide(pg_store, decision("j", 600))
    assert (again.answer, again.replayed, again.fence) == (Answer.DECIDED, True, reply.fence)


async def test_a_prune_deletes_the_claims_that_ran_out_and_answer_no_retry(
    pg_store: PostgresStore,
) -> None:
    """A claim run out is no claim to decide(): undecided, or at or below the cursor, nothing
    needs it; a decided one above the cursor stays until the day-old sweep."""
    await sql(
        pg_store, "INSERT INTO @schema@.jobs (ns, job, cursor_tick) VALUES (%(ns)s, 'j', 600)"
    )
    await sql(
        pg_store,
        "INSERT INTO @schema@.claims (ns, job, tick, owner, expires_us, memo) VALUES "
        "(%(ns)s, 'j', 540, 'n:1', @schema@.now_us() - 1000, '{\"answer\": \"decided\"}'), "
        "(%(ns)s, 'j', 600, 'n:1', @schema@.now_us() + 60000000, NULL), "
        "(%(ns)s, 'j', 660, 'n:1', @schema@.now_us() - 1000, NULL), "
        "(%(ns)s, 'j', 720, 'n:1', @schema@.now_us() - 1000, '{\"answer\": \"decided\"}')",
    )
    await sql(pg_store, "SELECT @schema@.prune(%(ns)s, @schema@.now_us())")
    left = await sql(pg_store, "SELECT tick FROM @schema@.claims WHERE ns = %(ns)s ORDER BY 1")
    assert left == [(600,), (720,)]


@pytest.fixture
async def readme_role_store(
    postgres_server: PostgresServer, namespace: str
) -> AsyncIterator[PostgresStore]:
    """A store connected as a role holding exactly the README's grants."""
    role = f"cursor_{namespace.lower()}"
    password = f"pw-{namespace}"
    for statement in readme_grants(role, password):
        postgres_server.execute(statement)
    url = postgres_server.url_for(user=role, password=password)
    store = PostgresStore.from_url(url, namespace)
    yield store
    await store.aclose()
    postgres_server.execute(f"DROP OWNED BY {role}")
    postgres_server.execute(f"DROP ROLE {role}")


async def test_the_readme_grants_are_enough_for_the_dense_cursor(
    readme_role_store: PostgresStore,
) -> None:
    store = readme_role_store
    await store.prepare()
    trigger_id = await store.request_trigger("j")
    granted = await decide(store, decision("j", 600))
    assert granted.verdict is Verdict.RUN
    assert await store.renew_lease("j", RenewRequest(granted.fence, 5000)) is Renewal.RENEWED
    record = RunRecord("j", 600, "n1", Outcome.OK, granted.fence)
    ended = await store.end_run(RunEnd("j", granted.fence, OWNER, 5000, record, 10))
    assert ended.decision is Release.RELEASED
    trigger = DecideRequest(
        "j", 599, 600, 540, (599,), (), str(OWNER), Overlap.SKIP, 5000, 60_000,
        trigger_id=trigger_id,
    )  # fmt: skip
    assert (await decide(store, trigger)).verdict is Verdict.RUN
    assert await store.cursors(["j"]) == {"j": 600}
    assert (await job_row(store, "j"))["outstanding"] == []
