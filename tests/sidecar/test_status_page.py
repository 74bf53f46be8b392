"""The status page: the fleet's view in plain, escaped HTML; buttons only when enabled."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.operate.fleetview import FleetView
from cronrace.sidecar.service import Sidecar
from cronrace.web.statuspage import render
from tests.helpers import wait_for
from tests.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = '<img src=x onerror="alert(1)">'

CONFIG = """
[agent]
store_url = "{url}"
namespace = "{namespace}"
# 6 s in the live set per beat: a page rendered while chromium starts and the loop
# that runs all three sidecars is starved still lists all three (CI on aa57622, four
# test workers on two cores: 1 s beats, 3 s live, and the page listed only the node
# whose beat ran first when the loop came back)
heartbeat_s = 2
shutdown_grace_s = 1
metrics_address = "off"

[[jobs]]
name = "cleanup"
schedule = "@every 1s"
[jobs.command]
argv = ["true"]

[[jobs]]
name = "nightly-report"
schedule = "*/2 * * * * *"
[jobs.command]
argv = ["sh", "-c", "echo '<b>boom</b> on the reporting db' >&2; exit 3"]

[[jobs]]
name = "sync-users"
schedule = "@every 3s"
timezone = "Europe/Amsterdam"
[jobs.command]
argv = ["sleep", "2"]

[[jobs]]
name = "import-orders"
schedule = "@every 2s"
[jobs.command]
argv = ["sleep", "3"]

[[jobs]]
name = "billing"
schedule = "0 3 * * *"
timezone = "America/New_York"
[jobs.command]
argv = ["true"]
"""


def _view(node: str = "node-a") -> FleetView:
    job = JobStatus(
        job="cleanup",
        schedule="*/5 * * * *",
        timezone="UTC",
        next_tick_s=1_700_000_300,
        last_tick_s=1_700_000_000,
        last_outcome="error",
        lease_owner=node,
        lease_fence=42,
        paused=False,
        skipped=3,
        missed=1,
        overlap="skip",
        catchup="latest",
    )
    run = RunRecord("cleanup", 1_700_000_000, node, Outcome.ERROR, 42, 1, 2, f"boom {HOSTILE}")
    return FleetView(
        namespace="demo",
        now_s=1_700_000_010,
        jobs=(job,),
        nodes=(NodeInfo(node, 1_700_000_016_000, 1_700_000_010_000),),
        runs=(run,),
    )


def test_page_escapes_every_value_and_loads_nothing_from_anywhere() -> None:
    page = render(_view(HOSTILE), actions_token=None, refresh_s=5)
    assert "<img" not in page
    # lease holder, the run's node, its error text, the live node
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert page.count(escaped) == 4
    markup = page.replace(escaped, "")
    for external in ("<script", "<link", "src=", "href=", "http://", "https://", "@import"):
        assert external not in markup
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "<form" not in page
    assert "read-only" in page


def test_page_says_under_a_job_what_is_wrong_with_it() -> None:
    view = _view()
    problem = f"live nodes define it differently: a: '*/5 * * * *' UTC; {HOSTILE}"
    view = dataclasses.replace(view, jobs=(dataclasses.replace(view.jobs[0], problem=problem),))
    page = render(view, actions_token=None, refresh_s=5)
    assert '<small class="problem">live nodes define it differently: a: ' in page
    assert "<img" not in page


def test_page_shows_buttons_with_the_form_token_only_when_enabled() -> None:
    page = render(_view(), actions_token="tok-123", refresh_s=5)  # noqa: S106 - a test value
    assert page.count('<form method="post" action="/actions">') == 2  # pause, trigger
    assert page.count('name="token" value="tok-123"') == 2


@asynccontextmanager
async def _serving(config: Path, **overrides: object) -> AsyncIterator[tuple[Sidecar, str]]:
    port = free_port()
    sidecar = Sidecar.from_file(config, metrics_address=f"127.0.0.1:{port}", **overrides)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sidecar.run)
        await wait_for(lambda: sidecar.agent.ready, timeout_s=10, what="the agent ready")
        url = f"http://127.0.0.1:{port}"

        async def page_bridged() -> bool:
            # Ready comes with the first heartbeat, which may go through before the page's
            # bridge into the agent's loop (a service) has started: until then the page
            # answers 503 "not running (yet)", as it should.
            async with httpx.AsyncClient(base_url=url, timeout=5) as http:
                return "not running (yet)" not in (await http.get("/status.json")).text

        await wait_for(page_bridged, timeout_s=10, what="the page's bridge into the agent")
        try:
            yield sidecar, url
        finally:
            sidecar.stop()


def _memory_config(tmp_path: Path, actions: bool) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[agent]\nstore_url = "memory://page-{secrets.token_hex(4)}"\n'
        f"status_page_actions = {str(actions).lower()}\n"
        "heartbeat_s = 0.3\nshutdown_grace_s = 1\n"
        "[[jobs]]\nname = 'cleanup'\nschedule = '@hourly'\n[jobs.command]\nargv = ['true']\n"
    )
    return path


async def test_page_is_read_only_unless_actions_are_enabled(tmp_path: Path) -> None:
    async with (
        _serving(_memory_config(tmp_path, actions=False)) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=5) as http,
    ):
        page = await http.get("/")
        assert page.status_code == 200, page.text  # a 503 says why (a slow loop, the store)
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        assert "cleanup" in page.text
        assert "<form" not in page.text
        refused = await http.post("/actions", data={"op": "pause", "job": "cleanup"})
        assert refused.status_code == 403
        view = (await http.get("/status.json")).json()
        assert [job["job"] for job in view["jobs"]] == ["cleanup"]
        assert view["jobs"][0]["paused"] is False


async def test_actions_need_the_page_token_and_a_same_origin_request(tmp_path: Path) -> None:
    async with (
        _serving(_memory_config(tmp_path, actions=True)) as (sidecar, url),
        httpx.AsyncClient(base_url=url, timeout=5) as http,
    ):
        page = (await http.get("/")).text
        token = page.split('name="token" value="', 1)[1].split('"', 1)[0]
        form = {"token": token, "op": "pause", "job": "cleanup"}
        cases = [
            ({**form, "token": "guessed"}, {}, 403),
            (form, {"Origin": "http://evil.example"}, 403),
            (form, {"Sec-Fetch-Site": "cross-site"}, 403),
            ({**form, "op": "delete"}, {}, 400),
            ({**form, "job": "nope"}, {}, 409),
        ]
        for data, headers, status in cases:
            answer = await http.post("/actions", data=data, headers=headers)
            assert answer.status_code == status, (data, headers, answer.text)
        assert not (await sidecar.agent.jobs_status())[0].paused

        host = url.removeprefix("http://")
        done = await http.post(
            "/actions",
            data=form,
            headers={"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"},
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/?did=pause&job=cleanup"
        assert (await sidecar.agent.jobs_status())[0].paused
        assert "paused cleanup" in (await http.get(done.headers["location"])).text


async def test_page_says_so_while_the_agent_is_not_running(tmp_path: Path) -> None:
    port = free_port()
    sidecar = Sidecar.from_file(
        _memory_config(tmp_path, actions=False), metrics_address=f"127.0.0.1:{port}"
    )
    sidecar.start_metrics()
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(f"http://127.0.0.1:{port}/")
        assert answer.status_code == 503
        assert "the agent is not running (yet)" in answer.text
    finally:
        sidecar.stop_metrics()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.redis
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (scripts/test.sh installs Debian's chromium when root)",
)
async def test_page_in_headless_chromium_shows_a_running_fleet(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """Three sidecars on one Redis; a real browser loads the page of one of them.

    ``CRONRACE_STATUS_SCREENSHOT=docs/status-page.png`` keeps the screenshot (the README's).
    """
    assert CHROMIUM is not None
    config = tmp_path / "cronrace.toml"
    screenshot = os.environ.get("CRONRACE_STATUS_SCREENSHOT")
    namespace = "shop" if screenshot else namespace  # a readable name in the README's picture
    config.write_text(CONFIG.format(url=redis_server.url, namespace=namespace))
    others = [Sidecar.from_file(config, node_id=f"shop-7d9f8c6b5-{n}") for n in ("k8q2m", "p4t7w")]
    async with (
        _serving(config, node_id="shop-7d9f8c6b5-x2x9z") as (sidecar, url),
        anyio.create_task_group() as tg,
    ):
        for other in others:
            tg.start_soon(other.run)
        agent = sidecar.agent
        await agent.pause("billing")

        async def fleet_busy() -> bool:
            rows = {row.job: row for row in await agent.jobs_status()}
            return (
                len(await agent.nodes()) == 3
                and rows["cleanup"].last_outcome == "ok"
                and rows["nightly-report"].last_outcome == "error"
                and rows["sync-users"].lease_owner is not None
            )

        await wait_for(fleet_busy, timeout_s=20, what="three nodes, runs and a held lease")
        if screenshot:  # the README's picture: a timeline with some history in it

            async def history() -> bool:
                return len(await agent.history("cleanup", 30)) >= 24

            await wait_for(history, timeout_s=60, what="24 runs of cleanup")
        shot = anyio.Path(screenshot or tmp_path / "page.png")
        shot_path = await shot.resolve()
        with tempfile.TemporaryDirectory() as profile:
            done = await anyio.run_process(
                [
                    CHROMIUM,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-extensions",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--hide-scrollbars",
                    f"--user-data-dir={profile}",
                    "--window-size=1366,1024",
                    f"--screenshot={shot_path}",
                    "--dump-dom",
                    f"{url}/",
                ],
                check=False,
            )
        for other in others:
            other.stop()
    dom = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    for text in ("cleanup", "nightly-report", "sync-users", "billing", "Latest runs"):
        assert text in dom
    for node in ("shop-7d9f8c6b5-x2x9z", "shop-7d9f8c6b5-k8q2m", "shop-7d9f8c6b5-p4t7w"):
        assert node in dom
    assert "3 live node(s)" in dom
    assert "Run timeline" in dom
    assert dom.count('<svg class="strip"') == 5  # one per job, drawn by the server
    assert "&lt;b&gt;boom&lt;/b&gt;" in dom  # the error text is text, not markup
    assert "<b>boom</b>" not in dom
    assert (await shot.read_bytes()).startswith(b"\x89PNG")


def test_screenshot_in_the_readme_exists() -> None:
    assert (ROOT / "docs" / "status-page.png").read_bytes().startswith(b"\x89PNG")
    assert "docs/status-page.png" in (ROOT / "README.md").read_text()
