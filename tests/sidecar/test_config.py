"""Config files: every mistake at once, one line each; the environment beats the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cronrace.cli.main import app
from cronrace.errors import ConfigError
from cronrace.sidecar.service import check_file, load_config
from tests.redis_server import free_port
from tests.sidecar.conftest import EXAMPLES, cronrace

TEN_MISTAKES = """
[agent]
store_url = "http://127.0.0.1:6379"
metrics_address = "everywhere"
shutdown_grace = 5

[[jobs]]
name = "backup"
schedule = "61 * * * *"
[jobs.command]
argv = "pg_dump mydb > /backups/db.sql"

[[jobs]]
name = "report"
schedule = "@daily"
timezone = "Europe/Atlantis"
overlap = "sometimes"
[jobs.http]
url = "http://169.254.169.254/latest/meta-data"

[[jobs]]
name = "report"
schedule = "@hourly"
[jobs.stream]
key = "reports"

[[jobs]]
name = "sync all"
schedule = "@every 1m"
[jobs.stream]
key = "sync"
"""

EXPECTED = [
    "agent: store_url 'http://127.0.0.1:6379': unknown scheme 'http://': use one of redis://",
    "agent: metrics_address 'everywhere': use host:port",
    "agent: shutdown_grace 5: unknown field",
    "job 'backup': schedule '61 * * * *': minute 61 out of range",
    "job 'backup': command.argv 'pg_dump mydb > /backups/db.sql': must be a list",
    "job 'report': http.url 'http://169.254.169.254/latest/meta-data': host '169.254.169.254' "
    "is not loopback",
    "job 'report': timezone 'Europe/Atlantis': unknown IANA time zone",
    "job 'report': overlap 'sometimes': input should be 'skip', 'queue_one', 'replace' or 'allow'",
    "job 'report': name 'report': is also the name of job #2",
    "job 'sync all': name 'sync all': use 1-128 letters",
]


@pytest.fixture
def bad_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(TEN_MISTAKES)
    return path


def _matches(lines: list[str], path: Path) -> None:
    assert len(lines) == len(EXPECTED), "\n".join(lines)
    for expected in EXPECTED:
        assert any(line.startswith(f"{path}: {expected}") for line in lines), expected


def test_validate_prints_ten_mistakes_on_ten_lines_and_exits_1(bad_file: Path) -> None:
    done = cronrace("validate", str(bad_file))
    assert done.returncode == 1
    assert done.stdout == ""
    _matches(done.stderr.splitlines(), bad_file)
    assert "Traceback" not in done.stderr


def test_run_with_a_bad_file_prints_the_same_lines_and_exits_1(bad_file: Path) -> None:
    validated = cronrace("validate", str(bad_file))
    ran = cronrace("run", "--config", str(bad_file))
    assert ran.returncode == 1
    assert ran.stderr == validated.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[agent\n", "invalid TOML: Expected ']' at the end of a table declaration (at line 1"),
        (
            "[[jobs]]\nname = 'x'\nschedule = '@hourly'\n[jobs.stream]\nkey = 'q'\n[tools]\n",
            "'tools': unknown table",
        ),
        ("[agent]\n", "jobs: none defined; add a [[jobs]] table"),
        (
            "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.http]\nurl='http://127.0.0.1/'\n"
            "[jobs.command]\nargv=['true']\n",
            "job 'x': targets [jobs.http], [jobs.command]: a job has exactly one",
        ),
        (
            "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.command]\nargv=['true']\n"
            "env={CRONRACE_FENCE='1'}\n",
            "job 'x': command.env {'CRONRACE_FENCE': '1'}: 'CRONRACE_FENCE' is set by cronrace",
        ),
        ("[[jobs]]\nschedule='@hourly'\n[jobs.stream]\nkey='q'\n", "job #1: name: is required"),
    ],
)
def test_each_problem_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: str
) -> None:
    monkeypatch.setenv("CRONRACE_STORE_URL", "memory://")
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}: {line}")


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    done = cronrace("validate", str(tmp_path / "nope.toml"))
    assert done.returncode == 1
    assert (
        done.stderr.strip() == f"{tmp_path / 'nope.toml'}: cannot read: No such file or directory"
    )


GOOD = """
[agent]
store_url = "redis://127.0.0.1:1/0"
namespace = "from-file"
allow_hosts = ["app"]

[[jobs]]
name = "ping"
schedule = "@every 1s"
[jobs.http]
url = "http://app:8000/ping"
"""


def test_environment_beats_the_file_and_flags_beat_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    assert load_config(path).agent.namespace == "from-file"
    monkeypatch.setenv("CRONRACE_NAMESPACE", "from-env")
    assert load_config(path).agent.namespace == "from-env"
    assert load_config(path, namespace="from-flag").agent.namespace == "from-flag"


def test_bad_environment_value_is_named_with_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    monkeypatch.setenv("CRONRACE_HEARTBEAT_S", "soon")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [line] = caught.value.problems
    assert line.startswith(f"{path}: agent: heartbeat_s 'soon' (from CRONRACE_HEARTBEAT_S): ")


@pytest.mark.parametrize(
    "path",
    [
        EXAMPLES / "sidecar.toml",
        EXAMPLES / "compose" / "cronrace.toml",
        EXAMPLES / "kubernetes" / "cronrace.toml",
    ],
    ids=lambda p: p.parent.name + "/" + p.name,
)
def test_example_configs_are_valid(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # examples/sidecar.toml is the image's default config: Redis comes from the environment.
    monkeypatch.setenv("CRONRACE_STORE_URL", "redis://127.0.0.1:6379/0")
    config = check_file(path)
    assert config.jobs


def test_validate_shows_the_jobs_of_a_good_file() -> None:
    result = CliRunner().invoke(
        app,
        ["validate", str(EXAMPLES / "sidecar.toml")],
        env={"CRONRACE_STORE_URL": "redis://127.0.0.1:6379/0"},
    )
    assert result.exit_code == 0, result.output
    assert "ok, 3 job(s)" in result.output
    assert "nightly-report" in result.output


@pytest.mark.parametrize(
    "command", ["run", "validate", "status", "history", "nodes", "pause", "resume", "trigger"]
)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
    assert "Exit codes" in result.output


def test_run_against_unreachable_redis_exits_3_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[agent]\nstore_url = "redis://127.0.0.1:{free_port()}/0"\nstartup_timeout_s = 0.5\n'
        'metrics_address = "off"\n'
        "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.stream]\nkey='q'\n"
    )
    done = cronrace("run", "--config", str(path))
    assert done.returncode == 3
    [line] = [line for line in done.stderr.splitlines() if line.startswith("cronrace:")]
    assert "unreachable for 0.5s at start-up" in line
    assert "Traceback" not in done.stderr


def test_operator_command_without_a_store_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    monkeypatch.delenv("CRONRACE_CONFIG", raising=False)
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 2
    assert "no store to talk to" in result.output


def test_a_bad_redis_url_is_shown_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    monkeypatch.setenv("CRONRACE_STORE_URL", "http://cron:s3cret@redis:6379/0")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [line] = caught.value.problems
    assert line.startswith(f"{path}: agent: store_url 'http://***@redis:6379/0' (from CRONRACE_")


def test_validate_refuses_a_schedule_that_never_fires_in_its_zone(tmp_path: Path) -> None:
    path = tmp_path / "spring.toml"
    path.write_text(
        "[agent]\nstore_url = 'memory://'\n"
        "[[jobs]]\nname = 'spring'\nschedule = '*/30 2 * 3 0#2'\ntimezone = 'America/New_York'\n"
        "[jobs.command]\nargv = ['true']\n"
        "[[jobs]]\nname = 'berlin'\nschedule = '*/30 2 * 3 0#2'\ntimezone = 'Europe/Berlin'\n"
        "[jobs.command]\nargv = ['true']\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"{path}: job 'spring': schedule '*/30 2 * 3 0#2': it never fires in America/New_York: "
    )
