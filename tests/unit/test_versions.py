"""`cronrace --version` and where each version it prints comes from."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from typer.testing import CliRunner

import cronrace
from cronrace.cli.main import app
from cronrace.model.versions import PROTOCOL_VERSION
from cronrace.stores.urls import postgres_schema_version

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "cronrace" / "stores" / "postgres" / "sql" / "migrations"


def test_version_names_the_package_the_protocol_and_the_schema() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == (
        f"cronrace {cronrace.__version__} (protocol {PROTOCOL_VERSION}, "
        f"PostgreSQL schema {postgres_schema_version()})\n"
    )


def test_short_flag_and_module_entry_point_print_the_same_line() -> None:
    short = CliRunner().invoke(app, ["-V"])
    done = subprocess.run(
        [sys.executable, "-m", "cronrace", "--version"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == short.stdout
    assert re.fullmatch(r"cronrace \S+ \(protocol \d+, PostgreSQL schema \d+\)\n", done.stdout)


def test_the_schema_version_is_the_newest_migration_file() -> None:
    newest = max(int(path.name[:4]) for path in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert postgres_schema_version() == newest


def test_the_package_version_has_one_source() -> None:
    """pyproject.toml reads the version from cronrace/model/versions.py (hatch)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "cronrace/model/versions.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", cronrace.__version__)
