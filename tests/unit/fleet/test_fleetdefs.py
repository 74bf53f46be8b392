"""Definition digests, disagreements between nodes, and stored schedules no node runs."""

from __future__ import annotations

from cronrace.fleet.definitions import NodeDetails, disagreements, job_definition, stored_problems
from cronrace.model.job import Job
from cronrace.sidecar.targets import HttpTarget
from cronrace.specs.stored import ScheduleSpec
from cronrace.specs.targets import HttpSpec


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
