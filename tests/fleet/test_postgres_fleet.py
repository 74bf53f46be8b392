"""A fleet on PostgreSQL: agents racing on a real server fire each tick exactly once."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, AgentSettings, OperatorClient, RunContext
from cronrace.errors import RedisPermissionError
from cronrace.model.policies import Outcome
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import Claim, Owner
from tests.helpers import Recorder, running, settings, wait_for
from tests.postgres_server import PGBOUNCER, PgBouncer, PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]


async def test_five_agents_on_postgres_fire_each_tick_exactly_once_with_fences_in_order(
    postgres_server: PostgresServer, namespace: str
) -> None:
    recorder = Recorder()
    agents = []
    for index in range(5):
        agent = Agent(settings=settings(postgres_server.url, namespace, f"node{index}"))
        agent.add_job(recorder.note, "* * * * * *", name="every-second")
        agent.add_job(recorder.note, "* * * * * *", name="also-every-second", overlap="queue_one")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 5, timeout_s=40, what="5 ticks")
        history_ = await agents[0].history("every-second", 100)
        nodes = await agents[0].nodes()
    for job in ("every-second", "also-every-second"):
        ticks = [run.tick_s for run in recorder.runs if run.job == job]
        assert [t for t, n in Counter(ticks).items() if n > 1] == [], f"{job}: a duplicate"
        assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1)), f"{job}: a miss"
        by_tick = sorted((run for run in recorder.runs if run.job == job), key=lambda r: r.tick_s)
        fences = [run.fence for run in by_tick]
        assert fences == sorted(set(fences)), f"{job}: fences must increase with ticks"
    ok = Counter(r.tick_s for r in history_ if r.outcome is Outcome.OK)
    assert all(n == 1 for n in ok.values())
    assert len({run.node for run in recorder.runs}) > 1, "runs spread over the nodes"
    assert len(nodes) == 5


def readme_grants(role: str, password: str) -> list[str]:
    """The docs' PostgreSQL GRANTs for ``role``, statement by statement, as a DBA runs them."""
    page = Path(__file__).parents[2] / "docs" / "how-to" / "postgresql.md"
    text = page.read_text(encoding="utf-8")
    block = text.split("<!-- postgres-grants -->", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    block = block.replace("cronrace_agent", role).replace("'change-me'", f"'{password}'")
    return [statement.strip() for statement in block.split(";") if statement.strip()]


@pytest.fixture
def grants_role(postgres_server: PostgresServer, namespace: str) -> Iterator[str]:
    """A login role holding exactly the grants docs/how-to/postgresql.md gives; its URL."""
    role = f"agent_{namespace.lower()}"
    password = f"pw-{namespace}"
    for statement in readme_grants(role, password):
        postgres_server.execute(statement)
    yield postgres_server.url_for(user=role, password=password)
    postgres_server.execute(f"DROP OWNED BY {role}")
    postgres_server.execute(f"DROP ROLE {role}")


async def test_a_fleet_runs_as_a_role_with_exactly_the_readme_grants(
    grants_role: str, namespace: str
) -> None:
    recorder = Recorder()
    written: list[bool] = []
    triggered: list[str] = []
    agents = []
    for index in range(3):
        agent = Agent(settings=settings(grants_role, namespace, f"node{index}"))

        async def tick(ctx: RunContext) -> None:
            if ctx.trigger_id is None:
                recorder.note(ctx)
            else:
                triggered.append(ctx.trigger_id)
            written.append(await ctx.fenced_set("last-tick", str(ctx.tick_s)))

        agent.add_job(tick, "* * * * * *", name="every-second", overlap="queue_one")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 3, timeout_s=40, what="3 ticks")
        trigger_id = await agents[0].trigger("every-second")
        await wait_for(lambda: triggered == [trigger_id], timeout_s=20, what="the trigger")
        await agents[0].pause("every-second")
        await agents[0].resume("every-second")
        statuses = await agents[0].jobs_status()
        history_ = await agents[0].history("every-second", 50)
        assert await agents[0].trigger_claimant("every-second", trigger_id) is not None
        problems = [agent.readiness_problem() for agent in agents]
    assert problems == [None, None, None]
    ticks = recorder.ticks()
    assert [t for t, n in Counter(ticks).items() if n > 1] == []
    assert all(written), "every run's fenced write went through, fences in order"
    assert [s.job for s in statuses] == ["every-second"]
    assert history_


async def test_a_missing_grant_is_refused_naming_the_table(
    grants_role: str, postgres_server: PostgresServer, namespace: str
) -> None:
    role = grants_role.split("//", 1)[1].split(":", 1)[0]
    postgres_server.execute(f"REVOKE INSERT ON cronrace.claims FROM {role}")
    store = PostgresStore.from_url(grants_role, namespace)
    try:
        await store.prepare()
        with pytest.raises(RedisPermissionError, match=r"table claims"):
            await store.claim([Claim("j", 100, 5000)], Owner.parse("a:1"))
        assert "claims" in (store.access.problem() or "")
    finally:
        await store.aclose()


@pytest.fixture
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the session's server (pool of 4)."""
    if PGBOUNCER is None:
        pytest.skip("pgbouncer not installed")
    bouncer = PgBouncer(postgres_server, pool_size=4)
    bouncer.start()
    yield bouncer
    bouncer.stop()


async def test_a_fleet_behind_pgbouncer_in_transaction_mode_fires_each_tick_once(
    pgbouncer: PgBouncer, namespace: str
) -> None:
    """Five agents share four server connections: every statement may land on another
    backend, so nothing may rely on session state (prepared statements, session locks)."""
    recorder = Recorder()
    agents = []
    for index in range(5):
        agent = Agent(settings=settings(pgbouncer.url, namespace, f"node{index}"))
        agent.add_job(recorder.note, "* * * * * *", name="every-second", overlap="queue_one")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 6, timeout_s=40, what="6 ticks")
        history_ = await agents[1].history("every-second", 100)
        problems = [agent.readiness_problem() for agent in agents]
    assert problems == [None] * 5
    ticks = recorder.ticks()
    assert [t for t, n in Counter(ticks).items() if n > 1] == []
    assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1)), "a tick was missed"
    fences = [run.fence for run in sorted(recorder.runs, key=lambda run: run.tick_s)]
    assert fences == sorted(set(fences))
    assert {r.tick_s for r in history_ if r.outcome is Outcome.OK} <= set(ticks)


# -- LISTEN/NOTIFY: triggers and notices wake the nodes -----------------------------------


async def trigger_latency_s(url: str, namespace: str) -> tuple[float, Agent]:
    """Run one agent (2 s heartbeat) on ``url``; trigger its job from an operator; return
    how long the trigger took to start the handler, and the agent (stopped)."""
    started: list[float] = []
    agent = Agent(
        settings=AgentSettings(
            store_url=url, namespace=namespace, node_id="listener", heartbeat_s=2.0,
            shutdown_grace_s=1.0,
        )
    )  # fmt: skip
    agent.add_job(lambda ctx: started.append(time.monotonic()), "@yearly", name="on-demand")
    operator = OperatorClient(AgentSettings(store_url=url, namespace=namespace, node_id="op"))
    try:
        async with running(agent):
            await wait_for(lambda: agent.ready, timeout_s=10, what="the agent ready")
            await anyio.sleep(1.5)  # the listener connected and proved itself
            sent = time.monotonic()
            await operator.trigger("on-demand")
            await wait_for(lambda: bool(started), timeout_s=10, what="the trigger's run")
    finally:
        await operator.aclose()
    return started[0] - sent, agent


async def test_a_trigger_reaches_a_node_by_notify_in_well_under_a_heartbeat(
    postgres_server: PostgresServer, namespace: str
) -> None:
    # poll_ms = 5 s: polling alone would take up to 5 s; the notification wakes the node.
    took_s, _ = await trigger_latency_s(f"{postgres_server.url}?poll_ms=5000", namespace)
    assert took_s < 0.5, f"the trigger took {took_s:.2f}s (heartbeat 2 s)"


async def test_behind_pgbouncer_notify_is_given_up_and_a_trigger_arrives_within_a_heartbeat(
    pgbouncer: PgBouncer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cronrace")
    took_s, _ = await trigger_latency_s(pgbouncer.url, namespace)
    assert took_s < 2.0, f"the trigger took {took_s:.2f}s (heartbeat 2 s)"
    assert any("LISTEN does not reach" in r.getMessage() for r in caplog.records)
