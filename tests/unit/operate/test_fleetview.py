"""The fleet's view: the latest runs across jobs, and each job's own history for the timeline."""

from __future__ import annotations

import secrets

from cronrace import AgentSettings
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.operate.client import OperatorClient
from cronrace.operate.fleetview import look


async def test_each_job_s_history_comes_with_the_view_and_the_latest_runs_stay_mixed() -> None:
    settings = AgentSettings(store_url=f"memory://view-{secrets.token_hex(4)}", namespace="v")
    async with OperatorClient(settings) as client:
        spec = {"schedule": "@every 1s", "timezone": "UTC", "overlap": "skip", "catchup": "latest"}
        await client.store.register_jobs({"busy": spec, "quiet": spec})
        busy = [RunRecord("busy", 1_800_000_000 + i, "n", Outcome.OK, i + 1) for i in range(40)]
        quiet = [RunRecord("quiet", 1_700_000_000, "n", Outcome.ERROR, 1)]
        await client.store.record([*busy, *quiet], history=100)

        view = await look(client, runs=10, runs_per_job=5, history=30)
        assert [r.tick_s for r in view.histories["busy"]] == [
            1_800_000_039 - i for i in range(30)
        ]  # newest first
        assert [r.outcome for r in view.histories["quiet"]] == [Outcome.ERROR]
        # A busy job still fills at most runs_per_job rows of the latest runs.
        assert [r.job for r in view.runs] == ["busy"] * 5 + ["quiet"]

        assert (await look(client, runs=10)).histories == {}  # not asked for: not read
