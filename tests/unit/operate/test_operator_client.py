"""The operator client: the CLI's way into a fleet, with no Agent and no per-job round trip."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from cronrace import AgentSettings, UnknownJobError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.operate.client import OperatorClient
from cronrace.operate.fleetview import look
from cronrace.stores.redis import Store


class RoundTrips:
    """Counts the round trips a client makes: direct commands and pipeline executions."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        client = store.client
        direct, pipeline = client.execute_command, client.pipeline

        async def execute_command(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await direct(*args, **kwargs)

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            execute = pipe.execute

            async def counted_execute(*a: Any, **k: Any) -> Any:
                self.count += 1
                return await execute(*a, **k)

            pipe.execute = counted_execute
            return pipe

        client.execute_command = execute_command
        client.pipeline = counted_pipeline


async def seed(store: Store, jobs: int) -> None:
    names = [f"job{index:05d}" for index in range(jobs)]
    spec = {"schedule": "*/5 * * * *", "timezone": "UTC", "overlap": "skip", "catchup": "latest"}
    await store.register_jobs({name: spec for name in names})
    records = [RunRecord(name, 1_800_000_000, "n1", Outcome.OK, fence=1) for name in names]
    await store.record(records, history=10)


async def status_round_trips(jobs: int) -> tuple[int, int]:
    settings = AgentSettings(store_url=f"memory://ops-{secrets.token_hex(4)}", namespace="ops")
    async with OperatorClient(settings) as client:
        await seed(client.store, jobs)
        trips = RoundTrips(client.store)
        rows = await client.jobs_status()
        assert len(rows) == jobs
        assert all(row.last_outcome == "ok" and row.schedule == "*/5 * * * *" for row in rows)
        status_trips = trips.count
        trips.count = 0
        view = await look(client, runs=25)
        assert len(view.runs) == min(25, jobs)
        return status_trips, trips.count


async def test_status_costs_the_same_round_trips_for_2_jobs_as_for_600() -> None:
    few = await status_round_trips(2)
    many = await status_round_trips(600)
    assert few == many
    assert few[0] <= 8  # schedules, known jobs, nodes, details, states, last records


async def test_client_pauses_and_reads_history_without_an_agent() -> None:
    settings = AgentSettings(store_url=f"memory://ops-{secrets.token_hex(4)}", namespace="ops")
    async with OperatorClient(settings) as client:
        await seed(client.store, 1)
        await client.pause("job00000")
        (row,) = await client.jobs_status()
        assert row.paused
        await client.resume("job00000")
        assert not (await client.jobs_status())[0].paused
        (record,) = await client.history("job00000")
        assert record.fence == 1
        with pytest.raises(UnknownJobError, match="nope"):
            await client.pause("nope")
    assert client._own_store is None  # closed on exit
