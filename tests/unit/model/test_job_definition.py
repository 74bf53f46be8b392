"""Bad job definitions fail at definition time, naming the job, the field and the value."""

from __future__ import annotations

import pytest

from cronrace import Agent, CronraceError, JobDefinitionError, ScheduleError


def handler(ctx: object) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "error", "mentions"),
    [
        ({"schedule": "61 * * * *"}, ScheduleError, ["job1", "61 * * * *"]),
        ({"schedule": "* * *"}, ScheduleError, ["job1", "* * *"]),
        ({"schedule": "@every 0s"}, ScheduleError, ["job1", "@every 0s"]),
        ({"schedule": "@sometimes"}, ScheduleError, ["job1", "@sometimes"]),
        ({"timezone": "Mars/Olympus"}, ScheduleError, ["job1", "Mars/Olympus"]),
        ({"timezone": "../etc/passwd"}, ScheduleError, ["job1", "../etc/passwd"]),
        ({"name": "bad name"}, JobDefinitionError, ["bad name"]),
        ({"name": "-leading-dash"}, JobDefinitionError, ["-leading-dash"]),
        ({"name": "x" * 129}, JobDefinitionError, ["x" * 129]),
        ({"name": "a{b}"}, JobDefinitionError, ["a{b}"]),
        ({"overlap": "sometimes"}, JobDefinitionError, ["job1", "overlap", "sometimes"]),
        ({"catchup": "everything"}, JobDefinitionError, ["job1", "catchup", "everything"]),
        ({"lease_ttl": 0}, JobDefinitionError, ["job1", "lease_ttl", "0"]),
        ({"max_catchup": 0}, JobDefinitionError, ["job1", "max_catchup", "0"]),
    ],
)
def test_invalid_job_field_raises_error_naming_job_and_value(
    options: dict[str, object], error: type[CronraceError], mentions: list[str]
) -> None:
    agent = Agent(store_url="memory://defs", node_id="n")
    kwargs: dict[str, object] = {"name": "job1", "schedule": "* * * * *", **options}
    schedule = kwargs.pop("schedule")
    with pytest.raises(error) as caught:
        agent.add_job(handler, str(schedule), **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    for text in mentions:
        assert text in message


def test_duplicate_job_name_is_refused() -> None:
    agent = Agent(store_url="memory://defs", node_id="n")
    agent.add_job(handler, "@hourly", name="nightly")
    with pytest.raises(JobDefinitionError, match=r"'nightly'.*already defined"):
        agent.add_job(handler, "@daily", name="nightly")


def test_decorator_names_job_after_function_and_accepts_enum_or_string_policies() -> None:
    agent = Agent(store_url="memory://defs", node_id="n")

    @agent.job("*/5 * * * * *", overlap="queue_one", catchup="all", lease_ttl=2.5)
    async def cleanup(ctx: object) -> None:
        return None

    job = agent.jobs["cleanup"]
    assert (job.overlap.value, job.catchup.value, job.lease_ttl_s) == ("queue_one", "all", 2.5)
    assert job.is_async


def test_invalid_agent_settings_name_the_field() -> None:
    with pytest.raises(CronraceError, match="namespace"):
        Agent(store_url="memory://", namespace="has space")
    with pytest.raises(CronraceError, match="store_url"):
        Agent(store_url="http://example.com")


def test_job_options_are_one_list_with_one_set_of_defaults() -> None:
    from cronrace.model.job import JOB_DEFAULTS, JOB_OPTION_NAMES
    from cronrace.specs.jobspec import JobSpec

    spec = JobSpec(name="j", schedule="* * * * *", http={"url": "http://127.0.0.1/"})
    options = spec.job_options()
    assert tuple(options) == JOB_OPTION_NAMES
    assert {key: options[key] for key in JOB_DEFAULTS} == JOB_DEFAULTS  # type: ignore[literal-required]
    job = Agent(store_url="memory://defs", node_id="n").add_job(handler, "* * * * *", **options)
    assert (job.overlap, job.catchup) == (JOB_DEFAULTS["overlap"], JOB_DEFAULTS["catchup"])
    assert (job.lease_ttl_s, job.catchup_window_s) == (30.0, 300.0)
    assert (job.max_catchup, job.history, job.overrun_ratio) == (100, 1000, 0.8)


def test_an_unknown_job_option_is_refused_naming_it() -> None:
    agent = Agent(store_url="memory://defs", node_id="n")
    options: dict[str, object] = {"name": "j", "lease_ttl_s": 5}
    with pytest.raises(JobDefinitionError, match="lease_ttl_s"):
        agent.add_job(handler, "* * * * *", **options)  # type: ignore[arg-type]


def test_a_jobs_spec_is_a_copy_and_needs_no_hashable_handler() -> None:
    from cronrace.model.job import Job

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, ctx: object) -> None:
            return None

    job = Job.define(handler, "*/5 * * * *", name="five", lease_ttl=2.5)
    spec = job.spec()
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["lease_ttl_s"] == "2.5"
    spec["schedule"] = "changed by a caller"
    assert job.spec()["schedule"] == "*/5 * * * *"  # the remembered spec stays whole
    odd = Job.define(Unhashable(), "@hourly", name="odd")
    assert odd.spec()["schedule"] == "@hourly"
