"""PostgreSQL URLs: chosen by scheme, cronrace's options taken out, passwords never shown."""

from __future__ import annotations

import sys

import pytest

from cronrace.errors import ConfigError
from cronrace.stores.postgres.urls import parse_postgres_url, redact
from cronrace.stores.urls import check_store_url, open_store


def test_libpq_options_pass_through_and_cronrace_options_are_taken_out() -> None:
    target = parse_postgres_url(
        "postgresql://u:secret@db:5433/app?sslmode=verify-full&schema=crons&poll_ms=250"
        "&options=-c%20statement_timeout%3D5s"
    )
    assert (target.schema, target.poll_ms) == ("crons", 250)
    assert "schema" not in target.conninfo
    assert "sslmode=verify-full" in target.conninfo
    assert "statement_timeout" in target.conninfo
    assert "secret" not in target.redacted


def test_listen_is_on_unless_the_url_turns_it_off() -> None:
    assert parse_postgres_url("postgresql://db/app").listen is True
    target = parse_postgres_url("postgresql://db/app?listen=off")
    assert target.listen is False
    assert "listen" not in target.conninfo


def test_a_schema_setting_applies_when_the_url_names_none() -> None:
    assert parse_postgres_url("postgres://db/app", "other").schema == "other"
    assert parse_postgres_url("postgres://db/app?schema=mine", "other").schema == "mine"
    assert parse_postgres_url("postgres://db/app").schema == "cronrace"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@db/app?schema=Bad-Name",
        "postgresql://u:pw@db/app?schema=1abc",
        "postgresql://u:pw@db/app?poll_ms=0",
        "postgresql://u:pw@db/app?poll_ms=soon",
        "postgresql://u:pw@db/app?listen=maybe",
    ],
)
def test_a_bad_cronrace_option_is_one_line_without_the_password(url: str) -> None:
    with pytest.raises(ValueError, match=r"schema|poll_ms|listen") as caught:
        check_store_url(url)
    assert "pw@" not in str(caught.value)


def test_passwords_are_redacted_in_the_authority_and_in_options() -> None:
    assert redact("postgresql://u:s3cret@h/db?password=other&sslmode=require") == (
        "postgresql://u:***@h/db?password=***&sslmode=require"
    )


def test_open_store_picks_the_postgres_store_by_scheme() -> None:
    store = open_store("postgres://u:pw@127.0.0.1:1/db", "ns1")
    assert type(store).__name__ == "PostgresStore"


def test_a_missing_driver_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name.startswith(("cronrace.stores.postgres.", "psycopg")) and name != (
            "cronrace.stores.postgres.urls"
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError) as caught:
        open_store("postgresql://u:pw@db/app")
    assert "pip install 'cronrace[postgres]'" in str(caught.value)
    assert "pw" not in str(caught.value).replace("postgres]", "")
