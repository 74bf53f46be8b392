"""Definition digests, disagreements between nodes, and stored schedules no node runs."""

from __future__ import annotations

import pytest

from cronrace.fleet import definitions
from cronrace.fleet.definitions import NodeDetails, disagreements, job_definition, stored_problems
from cronrace.model.job import Job
from cronrace.runtime.observer import Observer
from cronrace.sidecar.targets import HttpTarget
from cronrace.specs.stored import ScheduleSpec
from cronrace.specs.targets import HttpSpec
from cronrace.stores.redis import Store, make_client


async def handler(ctx: object) -> None:
    return None


def test_equal_definitions_digest_alike_and_any_change_shows() -> None:
    base = job_definition(Job.define(handler, "*/5 * * * *", name="cleanup"))
    assert job_definition(Job.define(handler, "*/5 * * * *", name="cleanup")) == base
    changed = [
        Job.define(handler, "*/10 * * * *", name="cleanup"),
        Job.define(handler, "*/5 * * * *", name="cleanup", timezone="Europe/Berlin"),
        Job.define(handler, "*/5 * * * *", name="cleanup", overlap="allow"),
        Job.define(handler, "*/5 * * * *", name="cleanup", lease_ttl=5),
        Job.define(HttpTarget(HttpSpec(url="http://127.0.0.1/a")), "*/5 * * * *", name="cleanup"),
    ]
    digests = {job_definition(job).digest for job in changed}
    assert base.digest not in digests
    assert len(digests) == len(changed)


def test_nodes_disagree_only_on_jobs_they_both_define_differently() -> None:
    five = job_definition(Job.define(handler, "*/5 * * * *", name="cleanup"))
    ten = job_definition(Job.define(handler, "*/10 * * * *", name="cleanup"))
    fleet = [
        NodeDetails("a", {"cleanup": five, "only-a": five}),
        NodeDetails("b", {"cleanup": five}),
        NodeDetails("c", {"cleanup": ten}),
    ]
    [found] = disagreements(fleet)
    assert found.job == "cleanup"
    assert found.describe() == "a, b: '*/5 * * * *' UTC; c: '*/10 * * * *' UTC"
    assert disagreements(fleet[:2]) == []
    again = NodeDetails.from_json("c", fleet[2].to_json())
    assert again == fleet[2]
    assert again.fingerprint() == fleet[2].fingerprint()
    assert NodeDetails.from_json("x", b"garbage") == NodeDetails("x")


def test_a_stored_schedule_no_live_node_can_run_is_reported_with_each_reason() -> None:
    specs = {
        "report": ScheduleSpec(name="report", schedule="@hourly", handler="send_report"),
        "ping": ScheduleSpec(name="ping", schedule="@hourly", http={"url": "http://127.0.0.1/"}),
    }
    web = NodeDetails("web", handlers=("other",))
    worker = NodeDetails("worker", handlers=("send_report",))
    sidecar = NodeDetails("side", targets=True, refused={"ping": "target refused: host"})
    assert stored_problems(specs, [web, worker]) == {
        "ping": "no live node runs it (web: runs no targets; worker: runs no targets)"
    }
    assert stored_problems(specs, [web, sidecar]) == {
        "report": "no live node runs it (web: no handler 'send_report'; side: no handler "
        "'send_report')",
        "ping": "no live node runs it (web: runs no targets; side: target refused: host)",
    }
    assert stored_problems(specs, []) == {}  # no live node at all is said once, elsewhere


async def test_a_dead_nodes_definitions_are_forgotten_only_once_dead_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A node whose beats were held up a few periods must find its definitions still
    # published when it beats again (it would otherwise publish them again, and every
    # node read that): only one dead for FORGET_AFTER_S is forgotten.
    monkeypatch.setattr(definitions, "FULL_READ_EVERY_EXCHANGES", 1)  # every read full
    store = Store(make_client("memory://forget"), "forget")
    await store.load_scripts()
    beat = await store.heartbeat("clock", now_ms=0, ttl_ms=1, epoch_candidate="e")
    now_ms = int(beat.server_time_s * 1000)
    reader = definitions.FleetDefinitions(store, "n1", Observer())
    quiet = definitions.FleetDefinitions(store, "n2", Observer())
    await store.heartbeat("n2", now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    await quiet.exchange(NodeDetails("n2"), now_ms)
    for after_s in (10, 40, 69):  # n2's beat expired 5 s in: dead, not forgotten
        at_ms = now_ms + after_s * 1000
        await store.heartbeat("n1", now_ms=at_ms, ttl_ms=5000, epoch_candidate="e")
        await reader.exchange(NodeDetails("n1"), at_ms)
        assert (await store.fleet.read_details(["n2"]))["n2"] is not None, after_s
    at_ms = now_ms + 71_000  # dead for 61 s of the reader's full reads
    await store.heartbeat("n1", now_ms=at_ms, ttl_ms=5000, epoch_candidate="e")
    await reader.exchange(NodeDetails("n1"), at_ms)
    assert await store.fleet.read_details(["n2"]) == {"n2": None}
    await store.aclose()
