"""How `cronrace` answers bad usage and unreachable Redis: one line, the documented exit code."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cronrace.cli import output as cli_output
from cronrace.cli.main import app
from cronrace.cli.options import EXIT_INVALID, EXIT_REDIS, EXIT_USAGE
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from tests.redis_server import free_port


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run"], EXIT_USAGE, "cronrace: give MODULE:ATTR or --config FILE"),
        (["run", "nocolon"], EXIT_USAGE, "is not MODULE:ATTR"),
        (["run", "no_such_module_xyz:agent"], EXIT_USAGE, "cannot import module"),
        (["run", "cronrace.cli.main:nothing"], EXIT_USAGE, "has no attribute 'nothing'"),
        (["run", "cronrace.cli.main:app"], EXIT_USAGE, "is a Typer, not a cronrace Agent"),
        (["history", "x", "--limit", "0"], EXIT_USAGE, ""),
    ],
)
def test_bad_usage_exits_2(args: list[str], code: int, message: str) -> None:
    exit_code, stderr = invoke(*args)
    assert exit_code == code
    assert message in stderr
    assert "Traceback" not in stderr


def test_validate_in_process_prints_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    path = tmp_path / "bad.toml"
    path.write_text("[agent]\nnamespace = 'a b'\n[[jobs]]\nname = 'x'\nschedule = 'never'\n")
    exit_code, stderr = invoke("validate", str(path))
    assert exit_code == EXIT_INVALID
    assert stderr.splitlines() == [
        f"{path}: agent: store_url: is required: set it in [agent] or as CRONRACE_STORE_URL. "
        "The embedded store is not a default here "
        '(each replica would run every job): for one process alone, write store_url = "memory://"',
        f"{path}: agent: namespace 'a b': use 1-64 letters, digits, '_', '.', '-'",
        f"{path}: job 'x': target: is required; add one of [jobs.http], [jobs.command], "
        "[jobs.stream]",
        f"{path}: job 'x': schedule 'never': expected 5 or 6 fields, got 1",
    ]


def test_sidecar_with_unreachable_redis_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[agent]\nstore_url = "redis://127.0.0.1:{free_port()}/0"\nstartup_timeout_s = 0.3\n'
        "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.stream]\nkey='q'\n"
    )
    exit_code, stderr = invoke("run", "--config", str(path), "--metrics-address", "127.0.0.1:0")
    assert exit_code == EXIT_REDIS
    last = stderr.strip().splitlines()[-1]
    assert "unreachable for 0.3s at start-up; last error: " in last
    assert "connecting to 127.0.0.1" in last  # the cause, not only the symptom


def test_agent_module_with_unreachable_redis_exits_3_and_serves_metrics_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myjobs_cli_test.py").write_text(
        textwrap.dedent(
            f"""
            from cronrace import Agent, AgentSettings

            agent = Agent(settings=AgentSettings(
                store_url="redis://127.0.0.1:{free_port()}/0", startup_timeout_s=0.3
            ))

            @agent.job("@hourly")
            async def nightly(ctx):
                pass
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    exit_code, stderr = invoke("run", "myjobs_cli_test:agent", "--metrics-address", "127.0.0.1:0")
    assert exit_code == EXIT_REDIS
    assert "unreachable for 0.3s at start-up" in stderr
    exit_code, stderr = invoke("run", "myjobs_cli_test:agent", "--metrics-address", "anywhere")
    assert exit_code == EXIT_USAGE
    assert "--metrics-address 'anywhere': use host:port" in stderr


def test_operator_command_against_unreachable_redis_exits_3() -> None:
    url = f"redis://user:secret@127.0.0.1:{free_port()}/0"
    for args in (["status"], ["nodes"], ["history", "x"], ["pause", "x"], ["trigger", "x"]):
        exit_code, stderr = invoke(*args, "--store-url", url)
        assert exit_code == EXIT_REDIS, args
        assert stderr.startswith("cronrace: Redis at redis://***@127.0.0.1:")
        assert "secret" not in stderr


def test_operator_commands_against_unreachable_postgresql_name_postgresql_not_redis() -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://user:secret@127.0.0.1:{free_port()}/app"
    for args in (["status"], ["db", "upgrade"]):
        exit_code, stderr = invoke(*args, "--store-url", url)
        assert exit_code == EXIT_REDIS, args
        [line] = stderr.splitlines()  # libpq's hint on a second line is not repeated
        assert line.startswith("cronrace: PostgreSQL at postgresql://***@127.0.0.1:"), stderr
        assert line.endswith("Connection refused")  # the cause, not only the symptom
        assert "Redis" not in stderr
        assert "secret" not in stderr


@pytest.mark.parametrize(
    ("delta_s", "text"),
    [
        (3.04, "in 3.0s"),
        (-42, "42s ago"),
        (600, "in 10m"),
        (-5400, "1.5h ago"),
        (172800, "in 2.0d"),
    ],
)
def test_relative_times_read_naturally(delta_s: float, text: str) -> None:
    assert cli_output.relative(delta_s) == text


def test_empty_answers_are_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    cli_output.print_history("backup", [], 80)
    cli_output.print_nodes([], "ns", 80)
    assert capsys.readouterr().out.splitlines() == [
        "no run records for 'backup' yet",
        "no live nodes in namespace 'ns'",
    ]


def test_history_table_shows_errors_counts_and_triggers(capsys: pytest.CaptureFixture[str]) -> None:
    records = [
        RunRecord("backup", 1_700_000_000, "n1", Outcome.MISSED, count=5),
        RunRecord(
            "backup", 1_700_000_060, "n2", Outcome.ERROR, 9, 1_000, 3_500, "TargetError: boom"
        ),
        RunRecord("backup", 1_700_000_120, "n3", Outcome.OK, 10, 1, 2, trigger_id="t-1"),
    ]
    cli_output.print_history("backup", records, None)
    out = capsys.readouterr().out
    for text in ("5 ticks", "TargetError: boom", "2.500s", "t-1", "missed"):
        assert text in out
