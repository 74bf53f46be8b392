"""Runs as plain asyncio tasks owned by the group of runs (tick/tasks.py): the group waits
for them, its cancellation reaches them once (their shielded clean-up completes), and it
ends on its own once they have."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from cronrace.tick.tasks import RunTasks


async def test_the_group_ends_once_its_runs_have() -> None:
    tasks = RunTasks()
    finished: list[int] = []

    async def run(number: int) -> None:
        await anyio.sleep(0.01 * number)
        finished.append(number)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as runs:
            for number in (3, 1, 2):
                tasks.start(run(number), f"run {number}", runs)
    assert finished == [1, 2, 3]
    assert len(tasks) == 0
    # A later run gets a supervisor of its own in a new group.
    with anyio.fail_after(5):
        async with anyio.create_task_group() as runs:
            tasks.start(run(0), "again", runs)
    assert finished[-1] == 0


async def test_cancelling_the_group_cancels_each_run_once_and_waits_for_its_clean_up() -> None:
    tasks = RunTasks()
    cleaned: list[str] = []
    started = anyio.Event()

    async def run(name: str) -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)  # a release that takes a while
                cleaned.append(name)
            raise

    with anyio.fail_after(5):
        async with anyio.create_task_group() as runs:
            tasks.start(run("a"), "a", runs)
            tasks.start(run("b"), "b", runs)
            await started.wait()
            runs.cancel_scope.cancel()
    assert sorted(cleaned) == ["a", "b"]  # both finished their clean-up before the group ended
    assert len(tasks) == 0


async def test_a_group_no_longer_running_starts_nothing() -> None:
    tasks = RunTasks()
    async with anyio.create_task_group() as runs:
        pass

    async def run() -> None:
        raise AssertionError("must not run")

    coro = run()
    with pytest.raises(RuntimeError):
        tasks.start(coro, "late", runs)
    assert coro.cr_frame is None  # closed, not left un-awaited
    assert len(tasks) == 0


async def test_an_error_ending_a_run_task_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    tasks = RunTasks()

    async def run() -> None:
        raise KeyError("a bug")

    with caplog.at_level(logging.ERROR, logger="cronrace.run"), anyio.fail_after(5):
        async with anyio.create_task_group() as runs:
            tasks.start(run(), "broken", runs)
        await asyncio.sleep(0)
    assert "a run's task ended with an error" in caplog.text
