"""Every Python snippet of the documentation is a file these tests import or run.

The pages include files of ``docs/snippets/`` and ``examples/`` (MyST ``literalinclude``);
a Python block written inline in a page or in the README must be an excerpt of such a file,
word for word, so no snippet can drift from code that runs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from cronrace import Agent
from cronrace.testing import memory_agent

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "docs" / "snippets"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(?:python|py|\{code-block\} python)\n(.*?)^```", re.M | re.S)
INCLUDE = re.compile(r"^```\{literalinclude\} (\S+)", re.M)


def load(path: Path) -> ModuleType:
    name = f"docs_snippet_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _embedded_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snippets build ``Agent()`` from the environment: keep them on the embedded store."""
    for name in ("CRONRACE_STORE_URL", "CRONRACE_REDIS_URL", "CRONRACE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("path", sorted(SNIPPETS.glob("*.py")), ids=lambda p: p.name)
def test_every_snippet_imports(path: Path) -> None:
    load(path)


def test_every_snippet_is_included_somewhere() -> None:
    included = {
        (page.parent / found).resolve()
        for page in PAGES
        for found in INCLUDE.findall(page.read_text(encoding="utf-8"))
    }
    unused = [p.name for p in SNIPPETS.glob("*.py") if p.resolve() not in included]
    assert not unused, f"snippets no page includes: {unused}"


def test_every_included_file_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {found}"
        for page in PAGES
        for found in INCLUDE.findall(page.read_text(encoding="utf-8"))
        if not (page.parent / found).is_file()
    ]
    assert not missing


def test_inline_python_blocks_are_excerpts_of_tested_files() -> None:
    sources = [p.read_text(encoding="utf-8") for p in SNIPPETS.glob("*.py")]
    sources += [p.read_text(encoding="utf-8") for p in (ROOT / "examples").rglob("*.py")]
    strays = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            body = textwrap.dedent(block).strip()
            if not any(body in source for source in sources):
                strays.append(f"{page.relative_to(ROOT)}: {body.splitlines()[0]!r}")
    assert not strays, "Python blocks that are no excerpt of docs/snippets or examples"


def test_process_agent_defines_its_job() -> None:
    module = load(SNIPPETS / "process_agent.py")
    job = module.agent.jobs["cleanup"]
    assert (job.overlap.value, job.catchup.value, job.lease_ttl_s) == ("skip", "latest", 30)


def test_add_job_defines_one_job_per_row() -> None:
    module = load(SNIPPETS / "add_job.py")
    assert sorted(module.agent.jobs) == sorted(module.REPORTS)


async def test_task_group_starts_and_stops_the_agent() -> None:
    module = load(SNIPPETS / "task_group.py")
    module.agent = memory_agent()  # the snippet's agent, on a store of its own
    module.agent.add_job(module.flush_buffers, "@every 10s", name="flush-buffers")
    serve = anyio.Event()
    serve.set()  # the service's work is done at once: main starts the agent, then stops it
    with anyio.fail_after(20):
        await module.main(serve)
    assert module.agent.readiness_problem() is not None  # stopped: no longer ready


async def test_operator_client_pauses_and_reads_history() -> None:
    module = load(SNIPPETS / "operator_client.py")
    agent = memory_agent()
    agent.add_job(module_job, "@every 1s", name="cleanup")
    with anyio.fail_after(20):
        async with agent:
            url, namespace = agent.settings.store_url, agent.settings.namespace
            records = await module.pause_and_look(url, namespace)
            assert isinstance(records, list)
            from cronrace import OperatorClient

            async with OperatorClient(agent.settings) as client:
                await module.look_around(client)


async def module_job(ctx: object) -> None:
    return None


async def test_stored_schedules_round_trip() -> None:
    module = load(SNIPPETS / "stored_schedules.py")
    agent = memory_agent()
    agent.add_handler("send_report", module.send_report)
    with anyio.fail_after(20):
        async with agent:
            await module.manage_schedules(agent)
            assert await agent.schedules.list() == []


async def test_fenced_write_refuses_a_lower_fence() -> None:
    from cronrace.stores.urls import open_store
    from cronrace.testing import run_handler

    module = load(SNIPPETS / "fenced_write.py")
    store = open_store("memory://docs-fenced")
    try:
        newer = await run_handler(module.publish_prices, fence=9, store=store)
        older = await run_handler(module.publish_prices, fence=8, store=store)
    finally:
        await store.aclose()
    assert (newer, older) == ("written", "refused: a newer run wrote first")


async def test_testing_snippet_passes() -> None:
    module = load(SNIPPETS / "testing_jobs.py")
    with anyio.fail_after(30):
        await module.test_cleanup_returns_what_it_did()
        await module.test_cleanup_fires_every_minute()


async def test_beat_schedule_becomes_jobs_that_send_the_task() -> None:
    from cronrace.testing import run_handler

    module = load(SNIPPETS / "from_beat.py")
    assert sorted(module.agent.jobs) == sorted(module.BEAT_SCHEDULE)
    job = module.agent.jobs["nightly-invoices"]
    await run_handler(job.handler, job="nightly-invoices", tick_s=1_700_000_000, fence=3)
    assert module.sent == [
        ("billing.tasks.invoices", {"kwargs": {"fence": 3, "tick_s": 1_700_000_000}})
    ]


def test_agent_is_the_public_one() -> None:
    assert load(SNIPPETS / "process_agent.py").agent.__class__ is Agent


async def test_app_monitoring_serves_metrics_and_probes() -> None:
    import httpx

    module = load(SNIPPETS / "app_monitoring.py")
    agent = memory_agent()  # the snippet's agent settings, on a store of its own
    agent.observer = module.observer
    agent.add_job(module_job, "@every 1s", name="cleanup")
    with anyio.fail_after(20):
        async with (
            module.monitored(agent, ("127.0.0.1", 0)) as server,
            httpx.AsyncClient(base_url=server.url) as client,
        ):
            metrics = await client.get("/metrics")
            health = await client.get("/healthz")
            ready = await client.get("/readyz")
    assert "cronrace_agent_info" in metrics.text
    assert (health.status_code, ready.status_code) == (200, 200)
