"""The store's URL setting: ``store_url`` / ``CRONRACE_STORE_URL``, with the older names
``redis_url`` / ``CRONRACE_REDIS_URL`` kept as aliases, each source's priority intact."""

from __future__ import annotations

import pytest

from cronrace.settings import AgentSettings, SidecarSettings


@pytest.fixture(autouse=True)
def _no_url_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    monkeypatch.delenv("CRONRACE_REDIS_URL", raising=False)


@pytest.mark.parametrize("name", ["store_url", "redis_url"])
def test_either_name_sets_the_store_url(name: str) -> None:
    settings = AgentSettings(**{name: "postgresql://db/app"})  # type: ignore[arg-type]
    assert settings.store_url == settings.redis_url == "postgresql://db/app"
    assert SidecarSettings.from_table({name: "redis://r:1/0"}).store_url == "redis://r:1/0"


@pytest.mark.parametrize("variable", ["CRONRACE_STORE_URL", "CRONRACE_REDIS_URL"])
def test_either_variable_beats_the_file_and_a_flag_beats_both(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "postgres://env/db")
    assert SidecarSettings.from_table({"store_url": "redis://file:1/0"}).store_url == (
        "postgres://env/db"
    )
    flagged = SidecarSettings.from_table({"redis_url": "redis://f:1/0"}, redis_url="redis://x:1/0")
    assert flagged.store_url == "redis://x:1/0"


def test_the_new_name_wins_where_one_source_gives_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONRACE_REDIS_URL", "redis://old:1/0")
    monkeypatch.setenv("CRONRACE_STORE_URL", "postgresql://new/db")
    assert AgentSettings().store_url == "postgresql://new/db"
    table = {"redis_url": "redis://old:1/0", "store_url": "redis://new:1/0"}
    monkeypatch.delenv("CRONRACE_REDIS_URL")
    monkeypatch.delenv("CRONRACE_STORE_URL")
    assert SidecarSettings.from_table(table).store_url == "redis://new:1/0"
