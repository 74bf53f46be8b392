"""`cronrace run` as PID 1 (a container's entrypoint) reaps orphans and stops on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cronrace.sidecar.pid1 import exit_code
from tests.sidecar.conftest import ROOT, wait_until


def _unshare_problem() -> str | None:
    if not sys.platform.startswith("linux"):
        return "PID namespaces are Linux's"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc is not permitted here: {probe.stderr.strip()}"
    return None


def _stat(pid: int) -> tuple[str, int] | None:
    """State letter and parent pid of a host process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def _children(parent: int) -> list[int]:
    pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    return [pid for pid in pids if (stat := _stat(pid)) is not None and stat[1] == parent]


def _zombies_of(parent: int) -> int:
    return sum(_stat(pid) == ("Z", parent) for pid in _children(parent))


PYTHON_CRONRACE = (sys.executable, "-m", "cronrace", "run")
CONFIG = """
[agent]
store_url = "memory://"
metrics_address = "off"
shutdown_grace_s = 2

[[jobs]]
name = "orphans"
schedule = "* * * * * *"
[jobs.command]
# The shell exits at once; its two background sleeps are orphaned (reparented to PID 1).
argv = ["sh", "-c", "echo $CRONRACE_TICK >> {ticks}; {orphan} & {orphan} & exit 0"]
timeout_s = 5
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_agent_as_pid_1_reaps_orphans_and_stops_on_sigterm_with_exit_0(tmp_path: Path) -> None:
    if (problem := _unshare_problem()) is not None:
        pytest.skip(problem)
    ticks = tmp_path / "ticks"
    config = tmp_path / "cronrace.toml"
    config.write_text(CONFIG.format(ticks=ticks, orphan="sleep 0.1 >/dev/null 2>&1"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("CRONRACE_")}
    with subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *PYTHON_CRONRACE, "--config", str(config)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as unshare:
        try:
            # unshare forks once: its child is the namespace's PID 1, i.e. `cronrace run`.
            wait_until(lambda: _children(unshare.pid), timeout_s=10, what="PID 1 to start")
            [pid1] = _children(unshare.pid)

            def tick_count() -> int:
                return len(ticks.read_text().split()) if ticks.exists() else 0

            wait_until(lambda: tick_count() >= 3, timeout_s=20, what="three ticks")
            # Every tick orphaned two sleeps that exited within 0.1 s: none may stay a zombie.
            wait_until(lambda: _zombies_of(pid1) == 0, timeout_s=3, what="no zombies")
            os.kill(pid1, signal.SIGTERM)
            _, err = unshare.communicate(timeout=20)
        finally:
            if unshare.poll() is None:
                unshare.kill()
    assert unshare.returncode == 0, err
    assert "signal received; shutting down gracefully" in err
    assert "second signal" not in err  # forwarded once
    # The agent still reaps its own children: the commands' exit codes reach their records.
    assert "outcome=ok" in err
    assert "outcome=error" not in err
    assert "Traceback" not in err


def test_exit_code_of_a_signalled_child_is_128_plus_the_signal() -> None:
    assert exit_code(0) == 0
    assert exit_code(3 << 8) == 3
    assert exit_code(signal.SIGTERM) == 128 + signal.SIGTERM
