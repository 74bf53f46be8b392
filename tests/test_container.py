"""The container, checked without a Docker daemon: lint, wheel, entrypoint, user, health check.

The image itself is built and run with podman in tests/container (where podman runs). What
cannot run here (no registry): pulling the base image by digest, and the HEALTHCHECK as
Docker schedules it.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import Marker

from cronrace.testing import memory_agent
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = (ROOT / "docker" / "requirements.lock").read_text()
DEPLOYMENT = (ROOT / "examples" / "kubernetes" / "deployment.yaml").read_text()
HADOLINT = shutil.which("hadolint") or shutil.which(
    "hadolint", path=str(Path(sys.executable).parent)
)


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (the test group brings it)")
def test_dockerfile_passes_hadolint() -> None:
    assert HADOLINT is not None
    done = subprocess.run(
        [HADOLINT, "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _requirement_names(text: str) -> set[str]:
    return {
        match.lower().replace("_", "-") for match in re.findall(r"^([A-Za-z0-9_.-]+)==", text, re.M)
    }


def test_image_dependencies_come_from_a_lock_with_hashes_covering_pyproject() -> None:
    # One lock for every supported Python: a pin may carry a marker (async-timeout, for
    # redis-py below 3.11.3), and pip skips the pins whose marker its interpreter fails.
    pinned = (
        r"^([A-Za-z0-9_.-]+)==(\S+)(?: ; ([^\\\n]+))? \\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)"
    )
    entries = re.findall(pinned, LOCK, re.M)
    assert len(entries) == len(_requirement_names(LOCK)) > 10  # every pin has its hashes

    def installed_on(python: str) -> set[str]:
        where = {"python_full_version": python, "python_version": python.rsplit(".", 1)[0]}
        where |= {"sys_platform": "linux", "implementation_name": "cpython"}
        return {name for name, _, mark, _ in entries if not mark or Marker(mark).evaluate(where)}

    # Debian bookworm's 3.11.2 (the tests' base image) needs it; python:3.12-slim does not.
    assert "async-timeout" in installed_on("3.11.2")
    assert "async-timeout" not in installed_on("3.12.8") | installed_on("3.13.1")
    assert {"psycopg", "psycopg-binary", "psycopg-pool"} <= installed_on("3.12.8")  # PostgreSQL
    pyproject = (ROOT / "pyproject.toml").read_text()
    deps_block = pyproject.split("dependencies = [", 1)[1].split("]\n", 1)[0]
    wanted = {
        re.split(r"[<>=\[;]", line.strip().strip('",'))[0].lower()
        for line in deps_block.splitlines()
        if line.strip().startswith('"')
    }
    assert wanted <= _requirement_names(LOCK), wanted - _requirement_names(LOCK)
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in DOCKERFILE
    assert "--require-hashes --no-deps -r docker/build-requirements.lock" in DOCKERFILE


def test_image_runs_as_the_non_root_user_kubernetes_expects_and_bakes_no_config() -> None:
    assert "useradd --system --uid 10001 --gid cronrace" in DOCKERFILE
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users == ["10001:10001"]  # numeric: runAsNonRoot can verify it
    assert "runAsUser: 10001" in DEPLOYMENT
    assert "examples/" not in DOCKERFILE.split("FROM ${PYTHON_IMAGE}\n", 1)[1]
    assert "/etc/cronrace/cronrace.toml" in DOCKERFILE


def test_kubernetes_example_meets_the_restricted_pod_security_standard() -> None:
    pod = DEPLOYMENT.split("    spec:\n", 1)[1]
    assert "seccompProfile: {type: RuntimeDefault}" in pod.split("containers:", 1)[0]
    assert "runAsNonRoot: true" in pod.split("containers:", 1)[0]
    section = pod.split("containers:", 1)[1].split("\n      volumes:", 1)[0]
    containers = re.split(r"\n        - name: ", section)[1:]
    assert [c.split("\n", 1)[0] for c in containers] == ["app", "cronrace"]
    for container in containers:
        assert "allowPrivilegeEscalation: false" in container
        assert "capabilities: {drop: [ALL]}" in container
        assert "privileged: true" not in container
        assert "hostPath" not in container
    assert "preStop:" in containers[0]  # the app serves until the sidecar's runs finish
    grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", pod).group(1))  # type: ignore[union-attr]
    pre_stop = int(re.search(r"sleep: \{seconds: (\d+)\}", containers[0]).group(1))  # type: ignore[union-attr]
    assert 30 < pre_stop < grace  # past the sidecar's shutdown_grace_s, before SIGKILL


def test_wheel_ships_the_scripts_the_typing_marker_and_the_entrypoint(tmp_path: Path) -> None:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling not installed (the test group brings it)")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("cronrace-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "cronrace/py.typed" in names
    for script in ("decide", "end_run", "renew_lease", "fenced_set", "_lib"):
        assert f"cronrace/stores/redis/lua/{script}.lua" in names
    assert not any(name.startswith(("tests/", "benchmarks/", "examples/")) for name in names)
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "cronrace = cronrace.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_entrypoint_without_a_mounted_config_says_what_to_mount() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cronrace", "run", "--config", "/etc/cronrace/cronrace.toml"],
        capture_output=True, text=True, timeout=30, check=False,
        env={"PATH": "/usr/bin:/bin", "CRONRACE_CONFIG": "/etc/cronrace/cronrace.toml"},
    )  # fmt: skip
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("cronrace: /etc/cronrace/cronrace.toml: no such file: mount your")


def _healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "docker" / "healthcheck.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:9464", "http://127.0.0.1:9464/healthz"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000/healthz"),
        ("[::]:9464", "http://[::1]:9464/healthz"),
        ("[::1]:9464", "http://[::1]:9464/healthz"),
        ("off", None),
    ],
)
def test_healthcheck_asks_where_metrics_are_served(address: str, url: str | None) -> None:
    assert _healthcheck().healthz_url(address) == url


def test_healthcheck_follows_the_config_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    healthcheck = _healthcheck()
    port = free_port()
    config = tmp_path / "cronrace.toml"
    config.write_text(f'[agent]\nmetrics_address = "0.0.0.0:{port}"\n')
    monkeypatch.delenv("CRONRACE_METRICS_ADDRESS", raising=False)
    monkeypatch.setenv("CRONRACE_CONFIG", str(config))
    assert healthcheck.main() == 1  # nothing serves yet: unhealthy
    not_ready = memory_agent()  # never started: alive, not ready
    server = MetricsServer("127.0.0.1", port, PrometheusObserver().registry, not_ready)
    server.start()
    try:
        assert healthcheck.main() == 0  # /healthz answers even while not ready
        monkeypatch.setenv("CRONRACE_METRICS_ADDRESS", "off")  # beats the file, as in `run`
        assert healthcheck.main() == 0
        monkeypatch.setenv("CRONRACE_METRICS_ADDRESS", f"127.0.0.1:{free_port()}")
        assert healthcheck.main() == 1
    finally:
        server.stop()
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"healthy: http://127.0.0.1:{port}/healthz answered 200"
    assert lines[2] == "healthy: metrics_address is off, nothing to ask"
