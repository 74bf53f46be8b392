"""Stored schedules: added, changed and removed at runtime, every node in step."""

from __future__ import annotations

import logging
import secrets

import pytest

from cronrace import Agent, RunContext
from cronrace.errors import JobDefinitionError, ScheduleError, UnknownJobError
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import history, running, settings

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000
HEARTBEAT_S = 0.4


def operator(url: str, namespace: str) -> Agent:
    return Agent(settings=settings(url, namespace, "operator"))


def fake_node(clock: FakeClock, url: str, name: str, ran: list[tuple[str, int]]) -> Agent:
    """A node on the fake clock; its handler "note" records (node, tick after ``T0``)."""
    # Beats at 0.4 s steps from -0.5: never on a tick, so a change made half-way between
    # two ticks is in every node before the next one, whatever the control stream does.
    agent = memory_agent(clock, store_url=url, node_id=name, heartbeat_s=HEARTBEAT_S)

    @agent.handler("note")
    async def note(ctx: RunContext) -> None:
        assert ctx.args == {"customer": "acme"}
        ran.append((ctx.node_id, ctx.tick_s - T0))

    return agent


async def test_stored_schedule_fires_once_per_tick_and_follows_update_pause_and_remove() -> None:
    # On a fake clock; on a real redis-server, in processes: tests/faults/test_stored_schedules.py
    clock = FakeClock(start_s=T0 - 0.5)
    url = f"memory://stored-{secrets.token_hex(4)}"
    ran: list[tuple[str, int]] = []
    nodes = [fake_node(clock, url, f"node{i}", ran) for i in range(3)]
    ops = Agent(store_url=url, node_id="operator")

    def ticks() -> list[int]:
        return [tick for _, tick in ran]

    async with running(*nodes):
        await clock.advance(1.0)  # tick 0 passes with nothing stored
        await ops.schedules.add("report", "* * * * * *", handler="note", args={"customer": "acme"})
        await clock.advance(4.0)  # ticks 1..4
        assert ticks() == [1, 2, 3, 4]

        await ops.schedules.update("report", schedule="*/3 * * * * *")
        await clock.advance(7.0)  # ticks 5..11: the new schedule's are 6 and 9
        assert ticks() == [1, 2, 3, 4, 6, 9]

        await ops.pause("report")
        await ops.schedules.update("report", schedule="* * * * * *")
        await clock.advance(3.0)  # ticks 12..14, paused
        await ops.resume("report")
        await clock.advance(2.0)  # ticks 15 and 16
        assert ticks() == [1, 2, 3, 4, 6, 9, 15, 16]
        records = await history(ops, "report", first_s=T0 + 12, last_s=T0 + 14)

        await ops.schedules.remove("report")
        await clock.advance(5.0)  # ticks 17..21
        assert all("report" not in n.scheduler.jobs for n in nodes if n.scheduler)
        assert ticks() == [1, 2, 3, 4, 6, 9, 15, 16], "fired after removal"
    assert len({node for node, _ in ran}) > 1
    assert [(r.tick_s - T0, r.outcome.value) for r in records] == [
        (12, "skipped:paused"),
        (13, "skipped:paused"),
        (14, "skipped:paused"),
    ]
    await ops.aclose()


async def test_node_without_the_handler_does_not_race_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    url = f"memory://stored-{secrets.token_hex(4)}"
    ran: list[tuple[str, int]] = []
    with_handler = fake_node(clock, url, "worker", ran)
    without = memory_agent(clock, store_url=url, node_id="web", heartbeat_s=HEARTBEAT_S)
    ops = Agent(store_url=url, node_id="operator")
    with caplog.at_level(logging.WARNING, logger="cronrace.agent.schedule_sync"):
        async with running(with_handler, without):
            await ops.schedules.add(
                "report", "* * * * * *", handler="note", args={"customer": "acme"}
            )
            await clock.advance(5.0)  # ticks 0..4, all run by the node with the handler
            assert ran == [("worker", tick) for tick in range(5)]
            assert without.sync is not None
            assert "report" in without.sync.refused
            assert without.scheduler is not None
            assert "report" not in without.scheduler.jobs
            await ops.schedules.add("orphan", "* * * * * *", handler="nobody")
            await clock.advance(1.0)
            assert await _problem(ops, "orphan"), "status reports the orphan"
            statuses = {row.job: row for row in await ops.jobs_status()}
            assert statuses["report"].problem is None
            assert statuses["report"].source == "stored"
    refusals = [r for r in caplog.records if r.__dict__.get("job") == "report"]
    assert len([r for r in refusals if r.__dict__.get("node") == "web"]) == 1
    await ops.aclose()


async def _problem(agent: Agent, job: str) -> bool:
    rows = {row.job: row for row in await agent.jobs_status()}
    problem = rows[job].problem if job in rows else None
    return problem is not None and "no live node runs it" in problem and "nobody" in problem


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"schedule": "61 * * * *", "handler": "note"}, ScheduleError, "minute 61 out of range"),
        (
            {"schedule": "* * * * *", "handler": "bad name"},
            JobDefinitionError,
            "handler 'bad name'",
        ),
        ({"schedule": "* * * * *"}, JobDefinitionError, "target: is required"),
        (
            {"schedule": "* * * * *", "handler": "note", "http": {"url": "http://127.0.0.1/"}},
            JobDefinitionError,
            "a job has exactly one",
        ),
        (
            {"schedule": "* * * * *", "http": {"url": "http://169.254.169.254/latest"}},
            JobDefinitionError,
            "is not loopback",
        ),
        (
            {"schedule": "* * * * *", "command": {"argv": "rm -rf /"}},
            JobDefinitionError,
            "command.argv",
        ),
        (
            {"schedule": "* * * * *", "handler": "note", "lease_ttl": 0},
            JobDefinitionError,
            "lease_ttl 0",
        ),
        (
            {"schedule": "* * * * *", "handler": "unknown", "strict": True},
            JobDefinitionError,
            "strict",
        ),
        (
            {"schedule": "* * * * *", "handler": "note", "args": {"a": None}},
            JobDefinitionError,
            "args.a is null",
        ),
    ],
)
async def test_bad_input_is_refused_in_one_line_and_nothing_is_written(
    redis_url: str, namespace: str, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    ops = operator(redis_url, namespace)
    before = await ops.store.schedules.read_all()
    with pytest.raises((error, JobDefinitionError)) as caught:
        await ops.schedules.add("report", **kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert await ops.store.schedules.read_all() == before
    await ops.aclose()


async def test_a_name_taken_by_a_job_in_code_or_a_stored_schedule_is_refused(
    redis_url: str, namespace: str
) -> None:
    coded = Agent(settings=settings(redis_url, namespace, "coded"))
    coded.add_job(lambda ctx: None, "* * * * *", name="cleanup")
    await coded.store.register_jobs({"cleanup": coded.jobs["cleanup"].spec()})
    ops = operator(redis_url, namespace)
    with pytest.raises(JobDefinitionError, match="already a job defined in code"):
        await ops.schedules.add("cleanup", "* * * * *", handler="note")
    await ops.schedules.add("report", "* * * * *", handler="note")
    with pytest.raises(JobDefinitionError, match="exists; use update"):
        await ops.schedules.add("report", "*/5 * * * *", handler="note")
    with pytest.raises(UnknownJobError, match="no stored schedule"):
        await ops.schedules.update("nope", schedule="* * * * *")
    with pytest.raises(UnknownJobError, match="no stored schedule"):
        await ops.schedules.remove("nope")
    assert [spec.name for spec in await ops.schedules.list()] == ["report"]
    assert (await ops.schedules.get("report")).schedule == "* * * * *"
    await ops.aclose()
    await coded.aclose()
