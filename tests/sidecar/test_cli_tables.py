"""The CLI fits a terminal: 80 columns, nothing cut, flags shown as flags, JSON everywhere."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from cronrace import Agent, AgentSettings
from cronrace.cli import output as cli_output
from cronrace.cli.main import app
from cronrace.cli.options import EXIT_INVALID, EXIT_USAGE
from cronrace.model.policies import Outcome
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.runtime.logs import JsonFormatter, TextFormatter
from cronrace.sidecar.service import load_config
from cronrace.timing.schedule import Schedule
from tests.redis_server import RedisServer

NOW_S = 1_780_000_000.0
LONG_JOB = "nightly-backup-of-the-orders-database"  # 37 characters
NODES = ("shop-7d9f8c6b5-x2x9z", "shop-7d9f8c6b5-k8q2m", "batch-worker-eu-west-1a-0")


def _jobs(names: list[str]) -> list[JobStatus]:
    outcomes = [outcome.value for outcome in Outcome]
    return [
        JobStatus(
            job=name,
            schedule="*/5 * * * * *" if index % 2 else "0 9 * * 1-5",
            timezone="America/Argentina/Buenos_Aires" if index % 3 == 0 else "UTC",
            next_tick_s=int(NOW_S) + 3 + index,
            last_tick_s=int(NOW_S) - 86_400 * index,
            last_outcome=outcomes[index % len(outcomes)],
            lease_owner=NODES[index % len(NODES)] if index % 2 else None,
            lease_fence=1_780_000_000_123_456 + index if index % 2 else None,
            paused=index % 4 == 0,
            skipped=12_345 * index,
            missed=7 * index,
            overlap="skip",
            catchup="latest",
        )
        for index, name in enumerate(names)
    ]


def _records() -> list[RunRecord]:
    records = []
    for index, outcome in enumerate(Outcome):
        records.append(
            RunRecord(
                job=LONG_JOB,
                tick_s=int(NOW_S) - 60 * index,
                node=NODES[index % len(NODES)],
                outcome=outcome,
                fence=1_780_000_000_123_456 + index,
                started_ms=int(NOW_S * 1000) - 5_000,
                finished_ms=int(NOW_S * 1000) - 1_250,
                error="TargetError: http POST http://127.0.0.1:8000/jobs/backup: 503" * index,
                count=index + 1,
                trigger_id="1780000000000-0" if index % 2 else None,
                detail={"status": 200, "body": "done"} if outcome is Outcome.OK else None,
            )
        )
    return records


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def _assert_fits_and_keeps(lines: list[str], whole: set[str], width: int = 80) -> None:
    assert lines
    for line in lines:
        assert len(line) <= width, f"{len(line)} columns: {line!r}"
        assert "…" not in line, line
    words = {word.strip(",()'") for line in lines for word in line.split()}
    cut = {value for value in whole if value not in words}
    assert not cut, f"cut or folded: {sorted(cut)}"


@pytest.mark.parametrize(
    "names",
    [
        ["cleanup", "report"],
        [LONG_JOB, "report", "a", "x" * 40, "sync.users-eu_1"],
        ["j" + str(index) for index in range(12)],
    ],
    ids=["short", "long-names", "many"],
)
def test_every_table_fits_80_columns_and_never_cuts_a_job_outcome_or_node(
    names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _jobs(names)
    nodes = [NodeInfo(node, int(NOW_S * 1000) + 6000, int(NOW_S * 1000)) for node in NODES]
    cli_output.print_status(jobs, nodes, "demo", NOW_S, 80)
    status = _lines(capsys)
    _assert_fits_and_keeps(
        status, {job.job for job in jobs} | {job.last_outcome or "-" for job in jobs} | set(NODES)
    )
    assert any(line.startswith("left out:") for line in status) or len(names) == 2

    records = _records()
    cli_output.print_history(LONG_JOB, records, 80)
    _assert_fits_and_keeps(_lines(capsys), {o.value for o in Outcome} | set(NODES) | {LONG_JOB})
    for record in records:
        cli_output.print_run(record, 80)
        _assert_fits_and_keeps(_lines(capsys), {record.outcome.value, record.node})
    cli_output.print_nodes(nodes, "demo", 80)
    _assert_fits_and_keeps(_lines(capsys), set(NODES))


def test_validate_table_fits_80_columns_and_shows_argv_as_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [agent]
            store_url = "redis://127.0.0.1:6399/0"

            [[jobs]]
            name = "{LONG_JOB}"
            schedule = "*/5 * * * * *"
            timezone = "America/Argentina/Buenos_Aires"
            [jobs.command]
            argv = ["/usr/local/bin/backup", "--target", "s3://bucket/orders; rm -rf /"]

            [[jobs]]
            name = "ping"
            schedule = "@every 1s"
            [jobs.http]
            url = "http://127.0.0.1:8000/jobs/ping/with/a/rather/long/path?and=query"
            """
        )
    )
    config = load_config(path)
    cli_output.print_config(config, 80)
    _assert_fits_and_keeps(_lines(capsys), {LONG_JOB, "ping"})
    cli_output.print_config(config, None)
    wide = capsys.readouterr().out
    assert 'command ["/usr/local/bin/backup", "--target", "s3://bucket/orders; rm -rf /"]' in wide


def test_wide_shows_every_column_and_the_whole_error(capsys: pytest.CaptureFixture[str]) -> None:
    cli_output.print_status(_jobs([LONG_JOB, "report"]), [], "demo", NOW_S, None)
    status = capsys.readouterr().out
    for header in ("schedule", "zone", "next tick", "last tick", "lease", "paused", "missed"):
        assert header in status
    assert "left out" not in status
    assert "no live node" in status
    error = "boom " * 100
    record = RunRecord("x", int(NOW_S), "n1", Outcome.ERROR, 1, 1, 2, error.strip())
    cli_output.print_history("x", [record], None)
    assert error.strip() in capsys.readouterr().out
    cli_output.print_history("x", [record], 80)
    assert "chars: --wide or --json" in " ".join(capsys.readouterr().out.split())


def test_help_shows_flags_as_flags() -> None:
    result = CliRunner().invoke(app, ["trigger", "--help"])
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout
    assert re.search(r"^\s+--wait\s+Wait for the run's record", result.stdout, re.M)
    assert "\\[agent]" not in result.stdout


def test_log_lines_show_ticks_as_iso_times_and_leave_out_empty_fields() -> None:
    record = logging.makeLogRecord(
        {
            "msg": "tick decided",
            "levelname": "INFO",
            "job": "backup",
            "tick": 1_700_000_000,
            "trigger": None,
            "error": "",
            "fence": 0,
        }
    )
    text = TextFormatter().format(record)
    assert text.endswith(
        "tick decided  job=backup tick=1700000000 tick_utc=2023-11-14T22:13:20Z fence=0"
    )
    data = json.loads(JsonFormatter().format(record))
    assert data["tick_utc"] == "2023-11-14T22:13:20Z"
    assert "trigger" not in data
    assert "error" not in data


def test_validate_reports_a_bad_method_and_a_foreign_url_together(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[agent]\nstore_url = 'memory://'\n[[jobs]]\nname = 'report'\nschedule = '@hourly'\n"
        "[jobs.http]\nurl = 'http://169.254.169.254/latest'\nmethod = 'FETCH'\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == EXIT_INVALID
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert any("http.method 'FETCH'" in line for line in lines)
    assert any("http.url 'http://169.254.169.254/latest': host" in line for line in lines)
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == EXIT_INVALID
    assert json.loads(result.stdout)["problems"] == lines


def test_validate_json_lists_jobs_with_their_target(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[agent]\nstore_url = 'memory://'\n"
        "[[jobs]]\nname = 'backup'\nschedule = '@hourly'\n[jobs.command]\nargv = ['true']\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] is True
    [job] = data["jobs"]
    assert (job["job"], job["target"], job["command"]["argv"]) == ("backup", "command", ["true"])
    assert job["next_tick_s"] % 3600 == 0


def test_syntax_error_in_the_user_module_is_one_line_with_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_jobs_cli.py").write_text("from cronrace import Agent\nagent = Agent(\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(app, ["run", "broken_jobs_cli:agent"])
    assert result.exit_code == EXIT_USAGE
    [line] = result.stderr.splitlines()
    assert line.startswith("cronrace: cannot import module 'broken_jobs_cli': ")
    assert f"{tmp_path / 'broken_jobs_cli.py'}:2: " in line


@pytest.mark.redis
def test_status_before_any_agent_registers_says_so_and_exits_1(
    redis_server: RedisServer, namespace: str
) -> None:
    result = CliRunner().invoke(app, ["status", "--store-url", redis_server.url, "-n", namespace])
    assert result.exit_code == EXIT_INVALID
    assert result.stderr.startswith(
        f"cronrace: no agent has registered in namespace {namespace!r} yet"
    )
    result = CliRunner().invoke(
        app, ["status", "--store-url", redis_server.url, "-n", namespace, "--json"]
    )
    assert (result.exit_code, json.loads(result.stdout)) == (EXIT_INVALID, [])


@pytest.mark.redis
async def test_history_is_sorted_by_tick_newest_first(
    redis_server: RedisServer, namespace: str
) -> None:
    agent = Agent(settings=AgentSettings(store_url=redis_server.url, namespace=namespace))
    agent.add_job(lambda ctx: None, "@every 1s", name="slow")
    try:
        await agent.store.register_jobs({"slow": agent.jobs["slow"].spec()})
        # A long run's record is written after the skips of the ticks it overlapped.
        written = [101, 102, 100, 104, 103]
        await agent.store.record(
            [RunRecord("slow", tick, "n1", Outcome.OK) for tick in written], history=100
        )
        assert [r.tick_s for r in await agent.history("slow", 3)] == [104, 103, 102]
        assert [r.tick_s for r in await agent.history("slow")] == [104, 103, 102, 101, 100]
    finally:
        await agent.aclose()


def test_run_sync_logs_to_stderr_when_the_program_set_up_no_logging(tmp_path: Path) -> None:
    script = tmp_path / "plain_script.py"
    script.write_text(
        textwrap.dedent(
            """
            from cronrace import Agent

            agent = Agent(store_url="memory://")

            @agent.job("@every 1s")
            async def hello(ctx):
                agent.stop()

            if __name__ == "__main__":
                agent.run_sync()
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "agent started" in done.stderr
    assert "run finished" in done.stderr
    assert "job=hello" in done.stderr


def test_validate_shows_the_next_three_ticks_of_each_job_in_its_zone(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[agent]\nstore_url = 'memory://'\n"
        "[[jobs]]\nname = 'payroll'\nschedule = '0 9 15W * *'\ntimezone = 'Europe/Berlin'\n"
        "[jobs.command]\nargv = ['true']\n"
        "[[jobs]]\nname = 'spread'\nschedule = 'H H * * *'\n[jobs.command]\nargv = ['true']\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    jobs = {job["job"]: job for job in json.loads(result.stdout)["jobs"]}
    for name, expr, zone in (
        ("payroll", "0 9 15W * *", "Europe/Berlin"),
        ("spread", "H H * * *", "UTC"),
    ):
        ticks = jobs[name]["next_ticks_s"]
        schedule = Schedule.parse(expr, zone, job=name)
        assert ticks == schedule.ticks_between(ticks[0] - 1, ticks[-1], 3)
        assert len(ticks) == 3
    shown = CliRunner().invoke(app, ["validate", str(path)]).stdout
    berlin = ZoneInfo("Europe/Berlin")
    for tick in jobs["payroll"]["next_ticks_s"]:
        local = datetime.fromtimestamp(tick, berlin)
        assert local.weekday() < 5  # W: a weekday, whatever day the 15th is
        assert f"{local:%a %Y-%m-%d} 09:00:00 {local:%Z}" in shown
