"""Operator controls from a process that runs no jobs: a script, a web app, an admin task.

Shown in docs/how-to/operate.md; run by tests/docs/test_snippets.py.
"""

from cronrace import AgentSettings, OperatorClient, RunRecord


async def pause_and_look(store_url: str, namespace: str) -> list[RunRecord]:
    settings = AgentSettings(store_url=store_url, namespace=namespace)
    async with OperatorClient(settings) as client:
        await client.pause("cleanup")  # recorded skipped:paused on every node, from the next tick
        await client.resume("cleanup")
        return await client.history("cleanup", limit=20)  # typed RunRecords, newest first


async def look_around(client: OperatorClient) -> None:
    await client.trigger("cleanup")  # one immediate run: its own claim, the same lease rules
    for row in await client.jobs_status():  # schedule, next and last tick, lease, paused, ...
        print(row.job, row.schedule, row.last_outcome)
    for node in await client.nodes():  # live nodes and their heartbeats
        print(node.node_id)
