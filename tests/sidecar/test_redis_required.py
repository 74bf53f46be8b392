"""A sidecar needs its Redis named: the embedded store is never its silent default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cronrace.sidecar.service import Sidecar, load_config
from cronrace.testing import free_port
from tests.sidecar.conftest import EXAMPLES, ROOT

JOB = "[[jobs]]\nname = 'x'\nschedule = '@hourly'\n[jobs.command]\nargv = ['true']\n"


def without_redis_env() -> dict[str, str]:
    names = ("CRONRACE_STORE_URL", "CRONRACE_REDIS_URL")
    return {key: value for key, value in os.environ.items() if key not in names}


@pytest.mark.timeout(90)
def test_image_config_without_a_redis_url_exits_1_with_one_line() -> None:
    # examples/sidecar.toml is the container image's default config (CMD run --config).
    done = subprocess.run(
        [sys.executable, "-m", "cronrace", "run", "--config", str(EXAMPLES / "sidecar.toml")],
        cwd=ROOT,
        env=without_redis_env(),
        capture_output=True,
        text=True,
        # One interpreter importing the CLI: ~1 s when quiet; a full run at load 25 took
        # over 10 s once. The exit code and the line are what is tested, not the start-up.
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"{EXAMPLES / 'sidecar.toml'}: agent: store_url: is required: ")
    assert 'store_url = "memory://"' in line


def test_memory_written_out_in_the_file_or_the_environment_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRONRACE_STORE_URL", raising=False)
    in_file = tmp_path / "in-file.toml"
    in_file.write_text(f"[agent]\nstore_url = 'memory://'\nmetrics_address = 'off'\n{JOB}")
    assert Sidecar.from_file(in_file).agent.settings.store_url == "memory://"
    in_env = tmp_path / "in-env.toml"
    in_env.write_text(JOB)
    monkeypatch.setenv("CRONRACE_STORE_URL", "memory://")
    assert load_config(in_env).agent.store_url == "memory://"


@pytest.mark.timeout(30)
def test_quick_start_agent_still_runs_on_the_embedded_store_by_default() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "cronrace", "run", "examples.hello:agent"],
        cwd=ROOT,
        env={**without_redis_env(), "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if "agent started" in line:
                    break
            assert any("embedded in-process store" in line for line in seen), seen
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=15)
            assert proc.returncode == 0
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.timeout(30)
def test_store_url_flag_beats_the_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "cronrace.toml"
    config.write_text(f"[agent]\nmetrics_address = 'off'\nstartup_timeout_s = 0.5\n{JOB}")
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cronrace",
            "run",
            "--config",
            str(config),
            "--store-url",
            f"redis://127.0.0.1:{port}/0",
            "--namespace",
            "flagged",
        ],
        cwd=ROOT,
        env={**without_redis_env(), "CRONRACE_STORE_URL": "redis://127.0.0.1:1/0"},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    # Unreachable (exit 3), and the line names the flag's server, not the environment's.
    assert done.returncode == 3, done.stderr
    assert f"127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_store_url_flag_with_module_attr_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cronrace", "run", "examples.hello:agent", "--store-url", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2
    assert "CRONRACE_STORE_URL" in done.stderr
