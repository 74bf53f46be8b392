"""Stored schedules: added, changed and removed at runtime, every node in step."""

from __future__ import annotations

import logging
import time
from collections import Counter

import pytest

from cronrace import Agent, RunContext
from cronrace.errors import JobDefinitionError, ScheduleError, UnknownJobError
from tests.helpers import Recorder, running, settings, wait_for


def node(url: str, namespace: str, name: str, recorder: Recorder, *, handler: bool = True) -> Agent:
    agent = Agent(settings=settings(url, namespace, name))
    if handler:

        @agent.handler("note")
        async def note(ctx: RunContext) -> None:
            assert ctx.args == {"customer": "acme"}
            recorder.note(ctx)

    return agent


def operator(url: str, namespace: str) -> Agent:
    return Agent(settings=settings(url, namespace, "operator"))


@pytest.mark.timeout(60)
async def test_stored_schedule_fires_once_per_tick_and_follows_update_pause_and_remove(
    redis_url: str, namespace: str
) -> None:
    if not redis_url.startswith("memory://"):
        pytest.skip("on a real redis-server: tests/faults/test_stored_schedules.py, processes")
    recorder = Recorder()
    nodes = [node(redis_url, namespace, f"node{i}", recorder) for i in range(3)]
    ops = operator(redis_url, namespace)
    async with running(*nodes):
        added_s = time.time()
        await ops.schedules.add("report", "* * * * * *", handler="note", args={"customer": "acme"})
        await wait_for(lambda: len(recorder.runs) >= 3, timeout_s=10, what="three runs")
        # Picked up within a heartbeat (0.5 s here) plus the tick it waited for.
        assert recorder.runs[0].tick_s - added_s <= 0.5 + 1.0
        ticks = recorder.ticks("report")
        assert len(ticks) == len(set(ticks)), "a tick fired twice"

        await ops.schedules.update("report", schedule="*/3 * * * * *")
        changed_s = time.time()
        await wait_for(
            lambda: len([t for t in recorder.ticks() if t > changed_s + 1]) >= 2,
            timeout_s=15,
            what="two ticks of the new schedule",
        )
        assert all(t % 3 == 0 for t in recorder.ticks() if t > changed_s + 0.5)

        await ops.pause("report")
        await ops.schedules.update("report", schedule="* * * * * *")
        paused_s = time.time()
        await wait_for(
            lambda: _skipped_paused(ops, paused_s),
            timeout_s=10,
            what="a tick recorded skipped:paused after the update",
        )
        assert not [t for t in recorder.ticks() if t > paused_s + 0.5]
        await ops.resume("report")
        await wait_for(
            lambda: any(t > paused_s + 1 for t in recorder.ticks()), timeout_s=10, what="resumed"
        )

        await ops.schedules.remove("report")
        removed_s = time.time()
        await wait_for(
            lambda: all("report" not in n.scheduler.jobs for n in nodes if n.scheduler),
            timeout_s=5,
            what="every node dropped it",
        )
        late = time.time()
        await _sleep_real(2.0)
        assert not [t for t in recorder.ticks() if t > late], "fired after removal"
        assert removed_s <= late
    ticks = recorder.ticks()
    assert [t for t, n in Counter(ticks).items() if n > 1] == []
    await ops.aclose()


async def _skipped_paused(agent: Agent, after_s: float) -> bool:
    records = await agent.history("report", 20)
    return any(r.outcome == "skipped:paused" and r.tick_s > after_s for r in records)


async def _sleep_real(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


@pytest.mark.timeout(30)
async def test_node_without_the_handler_does_not_race_and_says_so_once(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    with_handler = node(redis_url, namespace, "worker", recorder)
    without = node(redis_url, namespace, "web", recorder, handler=False)
    ops = operator(redis_url, namespace)
    with caplog.at_level(logging.WARNING, logger="cronrace.schedules"):
        async with running(with_handler, without):
            await ops.schedules.add(
                "report", "* * * * * *", handler="note", args={"customer": "acme"}
            )
            await wait_for(lambda: len(recorder.runs) >= 3, timeout_s=10, what="three runs")
            assert {run.node for run in recorder.runs} == {"worker"}
            assert without.sync is not None
            assert "report" in without.sync.refused
            assert without.scheduler is not None
            assert "report" not in without.scheduler.jobs
            await ops.schedules.add("orphan", "* * * * * *", handler="nobody")
            await wait_for(
                lambda: _problem(ops, "orphan"), timeout_s=10, what="status reports the orphan"
            )
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
