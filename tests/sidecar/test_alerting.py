"""Alerting that fits cron: last success, next tick and interval; rules checked by promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import httpx
import pytest

from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.sidecar.service import Sidecar
from tests.helpers import wait_for
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "examples" / "prometheus"
DASHBOARD = ROOT / "examples" / "grafana" / "cronrace-dashboard.json"
PROMTOOL = shutil.which("promtool")

CONFIG = """
[agent]
store_url = "memory://alerting-{port}"
heartbeat_s = 0.3
shutdown_grace_s = 1
metrics_address = "127.0.0.1:{port}"

[[jobs]]
name = "tick"
schedule = "@every 1s"
[jobs.command]
argv = ["true"]

[[jobs]]
name = "old"
schedule = "*/10 * * * *"
[jobs.command]
argv = ["true"]

[[jobs]]
name = "broken"
schedule = "@hourly"
[jobs.command]
argv = ["false"]

[[jobs]]
name = "new"
schedule = "@daily"
[jobs.command]
argv = ["true"]
"""


def _sample(text: str, name: str, job: str) -> float | None:
    match = re.search(rf'^{name}{{job="{job}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else None


async def test_metrics_give_last_success_next_tick_and_interval_and_no_created_series(
    tmp_path: Path,
) -> None:
    port = free_port()
    path = tmp_path / "c.toml"
    path.write_text(CONFIG.format(port=port))
    sidecar = Sidecar.from_file(path)
    # What the fleet wrote before this node started: the last success is read back.
    await sidecar.agent.store.record(
        [
            RunRecord(
                "old", 1_700_000_000, "n0", Outcome.OK, 1, 1_700_000_000_100, 1_700_000_002_500
            ),
            RunRecord("old", 1_700_000_600, "n0", Outcome.ERROR, 2, 1, 2, "boom"),
            RunRecord("broken", 1_700_003_600, "n0", Outcome.ERROR, 3, 1, 2, "boom"),
        ],
        history=100,
    )
    started_s = time.time()
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http,
    ):
        tg.start_soon(sidecar.run)

        async def scraped() -> str:
            return (await http.get("/metrics")).text

        async def ticked_ok() -> bool:
            return (
                _sample(await scraped(), "cronrace_last_success_timestamp_seconds", "tick")
                is not None
            )

        await wait_for(ticked_ok, timeout_s=10, what="a successful run counted")
        text = await scraped()
        sidecar.stop()
    last, since = (
        "cronrace_last_success_timestamp_seconds",
        "cronrace_watched_since_timestamp_seconds",
    )
    assert started_s <= (_sample(text, last, "tick") or 0) <= time.time()
    assert _sample(text, last, "old") == 1_700_000_002.5  # the newest ok in the history
    assert _sample(text, last, "broken") is None  # records, none ok: no success is known
    assert _sample(text, last, "new") is None  # no record at all
    for job in ("tick", "old", "broken", "new"):  # watched from this node's start on
        assert started_s <= (_sample(text, since, job) or 0) <= time.time()
    assert (_sample(text, "cronrace_next_tick_timestamp_seconds", "tick") or 0) >= started_s
    assert _sample(text, "cronrace_schedule_interval_seconds", "tick") == 1
    assert _sample(text, "cronrace_schedule_interval_seconds", "old") == 600
    assert _sample(text, "cronrace_schedule_interval_seconds", "new") == 86_400
    assert "_created" not in text


def test_a_last_success_exists_only_once_a_run_ended_ok() -> None:
    from cronrace.web.metrics import PrometheusObserver

    observer = PrometheusObserver()

    def last_success() -> float | None:
        return observer.registry.get_sample_value(
            "cronrace_last_success_timestamp_seconds", {"job": "nightly"}
        )

    observer.run_started("nightly", 0.01)
    observer.run_finished("nightly", Outcome.ERROR, 1.0, 0.1)
    assert last_success() is None  # not 0, not "now": no success happened
    began = time.time()
    observer.run_started("nightly", 0.01)
    observer.run_finished("nightly", Outcome.OK, 1.0, 0.1)
    assert began <= (last_success() or 0) <= time.time()


def _metric_names_in(text: str) -> set[str]:
    return set(re.findall(r"\bcronrace_[a-z_]+", text))


def test_every_metric_the_alerts_and_dashboard_use_is_exported() -> None:
    from cronrace.web.metrics import PrometheusObserver

    observer = PrometheusObserver()
    exported = set()
    for family in observer.registry.collect():
        exported.add(family.name)
        exported.update(sample.name for sample in family.samples)
    exported |= {"cronrace_next_tick_timestamp_seconds", "cronrace_schedule_interval_seconds"}
    exported |= {f"{name}_total" for name in exported} | {f"{name}_bucket" for name in exported}
    dashboard = json.loads(DASHBOARD.read_text())
    used = _metric_names_in((PROMETHEUS / "alerts.yml").read_text())
    used |= _metric_names_in(json.dumps(dashboard))
    assert used, "no metric found in the rules and dashboard"
    assert used <= exported, used - exported
    assert {panel["id"] for panel in dashboard["panels"]} == set(range(1, 13))


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (scripts/test.sh installs Debian's prometheus when root)",
)
@pytest.mark.parametrize(
    "args",
    [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
        ["check", "config", "prometheus.yml"],
    ],
    ids=["check-rules", "unit-test-rules", "check-config"],
)
def test_alert_rules_pass_promtool(args: list[str]) -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
