"""`cronrace schedules`: add, change, list, export, apply and remove from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cronrace.cli.main import app
from cronrace.cli.options import EXIT_INVALID, EXIT_USAGE
from cronrace.errors import TargetError
from cronrace.sidecar.service import Sidecar
from cronrace.specs.stored import ScheduleSpec
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis


def cli(server: RedisServer, namespace: str, *args: str) -> tuple[int, str, str]:
    env = {"CRONRACE_STORE_URL": server.url, "CRONRACE_NAMESPACE": namespace}
    result = CliRunner().invoke(app, ["schedules", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_schedules_round_trip_through_the_command_line(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    code, out, err = cli(
        redis_server, namespace, "add", "report-acme", "H 9 * * mon-fri",
        "--handler", "send_report", "--args", '{"customer": "acme"}', "--timezone", "Europe/Berlin",
    )  # fmt: skip
    assert (code, err) == (0, ""), err
    assert "added report-acme: 'H 9 * * mon-fri' Europe/Berlin, handler send_report" in out
    code, out, err = cli(
        redis_server,
        namespace,
        "add",
        "ping",
        "*/5 * * * *",
        "--http",
        "http://127.0.0.1:8000/ping",
    )
    assert code == 0, err
    code, out, _ = cli(redis_server, namespace, "ls", "--json")
    assert [row["name"] for row in json.loads(out)] == ["ping", "report-acme"]
    code, out, _ = cli(redis_server, namespace, "show", "report-acme", "--json")
    shown = json.loads(out)
    assert shown["args"] == {"customer": "acme"}
    assert len(shown["next_ticks_s"]) == 3

    exported = tmp_path / "schedules.toml"
    assert cli(redis_server, namespace, "export", str(exported))[0] == 0
    text = exported.read_text()
    assert '[[schedules]]\nname = "ping"' in text
    # Edit the file: change one, remove one, add one; the dry run writes nothing.
    text = text.replace('schedule = "*/5 * * * *"', 'schedule = "*/10 * * * *"')
    text = text.replace('name = "report-acme"', 'name = "report-beta"')
    exported.write_text(text)
    code, out, err = cli(redis_server, namespace, "apply", str(exported), "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert '~ ping: schedule "*/5 * * * *" -> "*/10 * * * *"' in lines
    assert any(line.startswith("+ report-beta: ") for line in lines)
    assert any(line.startswith("- report-acme: ") for line in lines)
    assert lines[-1] == "1 to add, 1 to update, 1 to remove, 0 unchanged (dry run: nothing written)"
    assert [r["name"] for r in json.loads(cli(redis_server, namespace, "ls", "--json")[1])] == [
        "ping",
        "report-acme",
    ]
    code, out, _ = cli(redis_server, namespace, "apply", str(exported), "--json")
    assert json.loads(out) == {
        "added": ["report-beta"],
        "updated": ["ping"],
        "removed": ["report-acme"],
        "unchanged": [],
        "written": True,
    }
    code, out, _ = cli(redis_server, namespace, "apply", str(exported))
    assert (
        out.splitlines()[-1] == "0 to add, 0 to update, 0 to remove, 2 unchanged: nothing to write"
    )

    code, out, err = cli(redis_server, namespace, "update", "ping", "--schedule", "@hourly")
    assert (code, out.startswith("updated ping: '@hourly' UTC")) == (0, True), err
    assert cli(redis_server, namespace, "rm", "ping")[0] == 0
    code, out, err = cli(redis_server, namespace, "rm", "ping")
    assert (code, err.strip()) == (
        EXIT_INVALID,
        f"cronrace: job 'ping': no stored schedule of that name in namespace {namespace!r}",
    )


def test_bad_input_is_one_line_per_problem_and_writes_nothing(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    # A schedule starting with '-' follows '--', as any argument that looks like a flag.
    code, _, err = cli(redis_server, namespace, "add", "--handler", "h", "--", "x", "-1 * * * *")
    assert code == EXIT_INVALID
    assert err.splitlines() == [
        "cronrace: job 'x': schedule '-1 * * * *': minute '-1': a range needs a "
        "start (numbers are never negative), e.g. 0-1"
    ]
    code, _, err = cli(redis_server, namespace, "add", "x", "* * * * *", "--args", "{nope")
    assert code == EXIT_USAGE
    assert "--args '{nope': is not JSON" in err
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "[[schedules]]\nname = 'a'\nschedule = '61 * * * *'\nhandler = 'h'\n"
        "[[schedules]]\nname = 'b'\nschedule = '* * * * *'\n[schedules.http]\n"
        "url = 'http://169.254.169.254/'\n"
        "[[schedules]]\nname = 'c'\nschedule = '* * * * *'\nhandler = 'h'\n"
        "command = {argv = ['x']}\n"
    )
    code, _, err = cli(redis_server, namespace, "apply", str(bad))
    assert code == EXIT_INVALID
    lines = err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == f"{bad}: job 'a': schedule '61 * * * *': minute 61 out of range 0-59"
    assert "job 'b': http.url 'http://169.254.169.254/': host" in lines[1]
    assert "job 'c': targets [schedules.command], handler: a job has exactly one" in lines[2]
    assert json.loads(cli(redis_server, namespace, "ls", "--json")[1]) == []


def test_command_targets_from_redis_need_the_sidecars_consent(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f"[agent]\nstore_url = '{redis_server.url}'\nnamespace = '{namespace}'\n"
        "[[jobs]]\nname = 'j'\nschedule = '@hourly'\n[jobs.command]\nargv = ['true']\n"
    )
    argv = '["/bin/echo", "hi"]'
    result = CliRunner().invoke(
        app, ["schedules", "add", "run-it", "@hourly", "--command", argv, "--config", str(config)]
    )
    assert result.exit_code == EXIT_INVALID
    assert "command targets from stored schedules are off in this config" in result.stderr
    sidecar = Sidecar.from_file(config)
    factory = sidecar.agent.target_factory
    assert factory is not None
    spec = ScheduleSpec(name="run-it", schedule="@hourly", command={"argv": ["/bin/echo"]})
    with pytest.raises(TargetError, match="add 'command' to \\[agent\\] stored_targets"):
        factory(spec)
    config.write_text(
        config.read_text().replace("[[jobs]]", "stored_targets = ['command']\n[[jobs]]")
    )
    assert callable(Sidecar.from_file(config).agent.target_factory(spec))  # type: ignore[misc]
    result = CliRunner().invoke(
        app, ["schedules", "add", "run-it", "@hourly", "--command", argv, "--config", str(config)]
    )
    assert result.exit_code == 0, result.stderr
