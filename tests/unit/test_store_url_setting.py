"""The store's URL is ``store_url`` (``CRONRACE_STORE_URL``, ``--store-url``,
``Agent(store_url=...)``); its name before PostgreSQL, ``redis_url``, still works in every
place it was accepted, with a CronraceDeprecationWarning naming what replaces it, and each
source's priority is intact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cronrace import Agent, AgentSettings, CronraceDeprecationWarning
from cronrace.cli.main import app
from cronrace.settings import SidecarSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_url_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    monkeypatch.delenv("CRONRACE_REDIS_URL", raising=False)


def test_the_new_names_set_the_store_url_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert AgentSettings(store_url="postgresql://db/app").store_url == "postgresql://db/app"
    assert Agent(store_url="memory://new", node_id="n").settings.store_url == "memory://new"
    assert SidecarSettings.from_table({"store_url": "redis://r:1/0"}).store_url == "redis://r:1/0"
    monkeypatch.setenv("CRONRACE_STORE_URL", "postgres://env/db")
    assert load_settings().store_url == "postgres://env/db"


def test_agent_redis_url_argument_works_and_warns() -> None:
    with pytest.warns(CronraceDeprecationWarning, match=r"Agent\(redis_url=...\) is deprecated"):
        agent = Agent(redis_url="memory://old", node_id="n")
    assert agent.settings.store_url == "memory://old"


def test_the_warning_points_at_the_caller() -> None:
    with pytest.warns(CronraceDeprecationWarning) as caught:
        Agent(redis_url="memory://old", node_id="n")
    assert caught[0].filename == __file__


def test_settings_redis_url_argument_and_attribute_work_and_warn() -> None:
    # The class's own keyword is read without a warning for now (see settings._OneName).
    settings = AgentSettings(redis_url="postgresql://db/app")  # type: ignore[call-arg]
    assert settings.store_url == "postgresql://db/app"
    with pytest.warns(CronraceDeprecationWarning, match="use store_url"):
        assert settings.redis_url == "postgresql://db/app"
    with pytest.warns(CronraceDeprecationWarning, match="redis_url is deprecated"):
        assert load_settings(redis_url="redis://x:1/0").store_url == "redis://x:1/0"


def test_the_file_s_redis_url_works_and_warns() -> None:
    with pytest.warns(CronraceDeprecationWarning, match=r"\[agent\] redis_url is deprecated"):
        settings = SidecarSettings.from_table({"redis_url": "redis://r:1/0"})
    assert settings.store_url == "redis://r:1/0"


def test_the_old_variable_works_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONRACE_REDIS_URL", "redis://old:1/0")
    with pytest.warns(CronraceDeprecationWarning, match="CRONRACE_REDIS_URL is deprecated.*"
                      "use CRONRACE_STORE_URL"):  # fmt: skip
        assert AgentSettings().store_url == "redis://old:1/0"


@pytest.mark.parametrize("variable", ["CRONRACE_STORE_URL", "CRONRACE_REDIS_URL"])
@pytest.mark.filterwarnings("ignore::cronrace.CronraceDeprecationWarning")
def test_either_variable_beats_the_file_and_a_flag_beats_both(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "postgres://env/db")
    assert SidecarSettings.from_table({"store_url": "redis://file:1/0"}).store_url == (
        "postgres://env/db"
    )
    flagged = SidecarSettings.from_table({"redis_url": "redis://f:1/0"}, store_url="redis://x:1/0")
    assert flagged.store_url == "redis://x:1/0"


def test_the_new_name_wins_where_one_source_gives_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONRACE_REDIS_URL", "redis://old:1/0")
    monkeypatch.setenv("CRONRACE_STORE_URL", "postgresql://new/db")
    with pytest.warns(CronraceDeprecationWarning, match="CRONRACE_STORE_URL is set, and wins"):
        assert AgentSettings().store_url == "postgresql://new/db"
    table = {"redis_url": "redis://old:1/0", "store_url": "redis://new:1/0"}
    monkeypatch.delenv("CRONRACE_REDIS_URL")
    monkeypatch.delenv("CRONRACE_STORE_URL")
    with pytest.warns(CronraceDeprecationWarning):
        assert SidecarSettings.from_table(table).store_url == "redis://new:1/0"


def test_the_redis_url_flag_works_and_warns_and_is_hidden_from_the_help() -> None:
    with pytest.warns(CronraceDeprecationWarning, match="--redis-url is deprecated.*--store-url"):
        result = CliRunner().invoke(app, ["status", "--redis-url", "memory://"])
    # Read as the store's URL: the embedded store has no fleet to talk to (exit 2).
    assert result.exit_code == 2
    assert "no store to talk to" in result.stderr
    help_text = CliRunner().invoke(app, ["status", "--help"]).stdout
    assert "--store-url" in help_text
    assert "--redis-url" not in help_text


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["status", "--redis-url", "memory://"], {}),
        (["status"], {"CRONRACE_REDIS_URL": "memory://"}),
    ],
)
def test_the_command_prints_the_deprecation_as_one_line(
    args: list[str], env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cronrace", *args],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    [warning, error] = done.stderr.splitlines()
    assert warning.startswith("cronrace: warning: ")
    assert "REDIS_URL is deprecated" in warning or "--redis-url is deprecated" in warning
    assert error.startswith("cronrace: no store to talk to: give --config FILE, --store-url")
