"""The deployment examples that no other test starts: the PostgreSQL compose demo and the
systemd unit. Their configs are valid, the demo's Dockerfile passes hadolint, and the unit
verifies with systemd's own checker and keeps its hardening."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cronrace.sidecar.service import check_file
from tests.examples.apps import EXAMPLES

POSTGRES_DEMO = EXAMPLES / "compose" / "postgres"
UNIT = EXAMPLES / "systemd" / "cronrace.service"
HADOLINT = shutil.which("hadolint") or shutil.which(
    "hadolint", path=str(Path(sys.executable).parent)
)
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def test_the_postgres_demo_config_is_valid_and_names_a_postgres_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    monkeypatch.delenv("CRONRACE_REDIS_URL", raising=False)
    config = check_file(POSTGRES_DEMO / "cronrace.toml")
    assert config.agent.store_url.startswith("postgresql://")
    assert [job.name for job in config.jobs] == ["cleanup", "report"]


def test_the_postgres_demo_upgrades_the_schema_before_the_agents_start() -> None:
    compose = (POSTGRES_DEMO / "docker-compose.yml").read_text()
    assert 'command: ["db", "upgrade"]' in compose
    assert "condition: service_completed_successfully" in compose
    assert "CRONRACE_STORE_URL: postgresql://" in compose
    assert "psycopg" in (POSTGRES_DEMO / "Dockerfile").read_text()


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (the test group brings it)")
def test_the_postgres_demo_dockerfile_passes_hadolint() -> None:
    assert HADOLINT is not None
    done = subprocess.run(
        [HADOLINT, "Dockerfile"], cwd=POSTGRES_DEMO, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_systemd_unit_runs_the_sidecar_hardened() -> None:
    unit = _directives(UNIT.read_text())
    assert unit["ExecStart"] == [
        "/opt/cronrace/bin/cronrace run --config /etc/cronrace/cronrace.toml"
    ]
    for key, value in {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
        "KillSignal": "SIGTERM",
        # Invalid config, bad usage and a refusal do not pass by restarting.
        "RestartPreventExitStatus": "1 2 4",
    }.items():
        assert unit[key] == [value], key
    # Longer than the default shutdown_grace_s (30 s): runs finish before SIGKILL.
    assert int(unit["TimeoutStopSec"][0]) > 30


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd's own checker finds nothing, once ExecStart names a cronrace that exists."""
    assert SYSTEMD_ANALYZE is not None
    command = Path(sys.executable).parent / "cronrace"
    text = UNIT.read_text().replace("/opt/cronrace/bin/cronrace", str(command))
    copy = tmp_path / "cronrace.service"
    copy.write_text(text)
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout + done.stderr == ""
