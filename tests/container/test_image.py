"""The sidecar image, built from the Dockerfile and run as a user runs it (podman).

Select with ``-m container``. The image is built once per run (xdist's workers share it) on a
base made from Debian's packages (tests/container/podman.py); each test starts its own
containers and servers and removes them at the end. The figures (image size, start-up time
to ready, the fleets' ticks, duplicates and misses) are printed at the end of the run.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.container.podman import Built, Podman
from tests.container.sidecars import (
    CONFIG_IN_IMAGE,
    SHUTDOWN_GRACE_S,
    WITNESS_JOB,
    Sidecar,
    Sidecars,
    Stopped,
    agent_table,
    http_status,
    in_hand,
    judge,
    make_witness,
    runs,
    wait_until,
)
from tests.postgres_server import PostgresServer, postgres_available
from tests.redis_server import RedisServer, free_port, redis_available

pytestmark = [pytest.mark.container, pytest.mark.slow, pytest.mark.timeout(900)]

#: Ticks each fleet runs with both nodes up, then again with one left after the other stopped.
SPAN_TICKS = 6


def _config(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o644)  # read by the containers' user, 10001
    return path


def _record(record_property: pytest.RecordProperty, figure: str) -> None:
    record_property("container-figures", figure)  # printed in the run's summary


def test_image_runs_as_a_non_root_user_and_validates_a_mounted_config(
    sidecars: Sidecars,
    podman: Podman,
    built: Built,
    tmp_path: Path,
    record_property: pytest.RecordProperty,
) -> None:
    made = "kept" if built.base_made_s is None else f"made in {built.base_made_s:.0f} s"
    _record(
        record_property,
        f"image {built.size_bytes / 1e6:.0f} MB, built in {built.build_s:.1f} s (base {made})",
    )
    user = podman("image", "inspect", "--format", "{{.Config.User}}", built.image).stdout.strip()
    assert user == "10001:10001"
    code, out, err = sidecars.once("--entrypoint", "id", built.image, "-u")
    assert (code, out.strip()) == (0, "10001"), err

    good = _config(
        tmp_path / "good.toml", agent_table("v", store_url="redis://127.0.0.1:1/0") + WITNESS_JOB
    )
    mount = ["-v", f"{good}:{CONFIG_IN_IMAGE}:ro"]
    code, out, err = sidecars.once(*mount, built.image, "validate", CONFIG_IN_IMAGE)
    assert code == 0, out + err
    assert out.startswith(f"{CONFIG_IN_IMAGE}: ok, 1 job(s)")

    bad = _config(
        tmp_path / "bad.toml", good.read_text().replace('"* * * * * *"', '"61 * * * * *"')
    )
    mount = ["-v", f"{bad}:{CONFIG_IN_IMAGE}:ro"]
    code, out, err = sidecars.once(*mount, built.image, "validate", CONFIG_IN_IMAGE)
    assert code == 1
    assert err.strip().splitlines() == [
        f"{CONFIG_IN_IMAGE}: job 'witness': schedule '61 * * * * *': second 61 out of range 0-59"
    ]

    code, out, err = sidecars.once(built.image)  # `run` with nothing mounted
    assert code == 1
    [line] = err.strip().splitlines()
    assert line.startswith(f"cronrace: {CONFIG_IN_IMAGE}: no such file: mount your config file")


def test_metrics_answer_outside_the_container_when_bound_to_0_0_0_0(
    sidecars: Sidecars, tmp_path: Path
) -> None:
    config = _config(
        tmp_path / "cronrace.toml", agent_table("m", store_url="memory://") + WITNESS_JOB
    )
    witness = make_witness(tmp_path / "witness")
    wildcard_port, loopback_port = free_port(), free_port()
    wildcard = sidecars.start(
        "wildcard", config, witness=witness, metrics_address="0.0.0.0:9464",
        network=("-p", f"127.0.0.1:{wildcard_port}:9464"),
    )  # fmt: skip
    loopback = sidecars.start(
        "loopback", config, witness=make_witness(tmp_path / "witness-2"),
        metrics_address="127.0.0.1:9464", network=("-p", f"127.0.0.1:{loopback_port}:9464"),
    )  # fmt: skip
    # Published from the container's own network namespace: only a wildcard bind is reached.
    sidecars.wait_ready(wildcard, f"http://127.0.0.1:{wildcard_port}/readyz")
    metrics = _get(f"http://127.0.0.1:{wildcard_port}/metrics")
    assert "cronrace_runs" in metrics
    assert sidecars.healthcheck(wildcard)[0] == 0
    # The loopback-bound one is alive inside (its health check asks there) ...
    wait_until(
        lambda: sidecars.healthcheck(loopback)[0] == 0, timeout_s=60, what="loopback healthy"
    )
    # ... and unreachable from outside: the reason the compose and Kubernetes examples bind
    # 0.0.0.0.
    assert http_status(f"http://127.0.0.1:{loopback_port}/metrics") is None


def _get(url: str) -> str:
    answer = httpx.get(url, timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.text


def _run_fleet(
    sidecars: Sidecars,
    config: Path,
    witness: Path,
    record_property: pytest.RecordProperty,
    store: str,
    env: dict[str, str] | None = None,
) -> None:
    """Two sidecars on one namespace; stop one, then the other; every tick ran once."""
    fleet = [sidecars.start(node, config, witness=witness, env=env) for node in ("a", "b")]
    for sidecar in fleet:
        sidecars.wait_ready(sidecar)
        code, said = sidecars.healthcheck(sidecar)
        assert code == 0, said
        assert "cronrace_runs" in _get(f"http://127.0.0.1:{sidecar.metrics_port}/metrics")
    _wait_ticks(witness, SPAN_TICKS, "both nodes")
    stops = [_stop_holding_a_run(sidecars, witness, fleet)]
    fleet = [sidecar for sidecar in fleet if sidecar is not stops[0][0]]
    _wait_ticks(witness, SPAN_TICKS, "the node left")
    stops.append(_stop_holding_a_run(sidecars, witness, fleet))
    verdict = judge(runs(witness))
    ready = " and ".join(f"{sidecar.ready_s:.2f} s" for sidecar, _ in stops)
    took = " and ".join(f"{stopped.stop_s:.1f} s" for _, stopped in stops)
    _record(
        record_property,
        f"{store}: start-up to ready {ready}; stops with a run in hand {took} "
        f"(grace {SHUTDOWN_GRACE_S} s); {verdict.figures()}",
    )
    assert verdict.duplicates == []
    assert verdict.misses == []
    assert verdict.fence_regressions == []
    assert in_hand(witness) == []  # no run cut short, by either stop
    assert verdict.ticks >= 2 * SPAN_TICKS
    assert set(verdict.runs_per_node) <= {"a", "b"}


def _stop_holding_a_run(
    sidecars: Sidecars, witness: Path, fleet: list[Sidecar]
) -> tuple[Sidecar, Stopped]:
    """`podman stop` (SIGTERM to PID 1) one of ``fleet`` while a run of its own is in hand:
    the run ends (within the grace: its end is written), the container exits 0."""
    nodes = {sidecar.node: sidecar for sidecar in fleet}
    held: list[tuple[int, str, int]] = []

    def holding() -> bool:
        held[:] = [run for run in in_hand(witness) if run[1] in nodes]
        return bool(held)

    wait_until(holding, timeout_s=30, what="a run in hand")
    sidecar = nodes[held[-1][1]]
    stopped = sidecars.stop(sidecar)
    assert stopped.exit_code == 0, stopped.logs[-3000:]
    assert "Traceback" not in stopped.logs
    assert held[-1] not in in_hand(witness), f"{held[-1]} cut short:\n{stopped.logs[-3000:]}"
    return sidecar, stopped


def _wait_ticks(witness: Path, count: int, what: str) -> None:
    """Wait until ``count`` more ticks have run (by anyone) than had when called."""
    before = {tick for tick, _, _ in runs(witness)}
    wait_until(
        lambda: len({tick for tick, _, _ in runs(witness)} - before) >= count,
        timeout_s=count + 30,
        what=f"{count} ticks with {what}",
    )


@pytest.mark.redis
def test_two_sidecars_share_a_redis_fleet_each_tick_once_and_stop_on_sigterm(
    sidecars: Sidecars, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path / "redis", appendonly=False)
    server.start()
    try:
        config = _config(
            tmp_path / "cronrace.toml", agent_table("fleet", store_url=server.url) + WITNESS_JOB
        )
        _run_fleet(sidecars, config, make_witness(tmp_path / "witness"), record_property, "Redis")
    finally:
        sidecars.remove_all()
        server.stop()


@pytest.mark.postgres
def test_db_upgrade_from_the_image_then_two_sidecars_share_a_postgres_fleet(
    sidecars: Sidecars, built: Built, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    if not postgres_available():
        pytest.skip("PostgreSQL not installed")
    server = PostgresServer()
    try:
        server.start()
        # The password travels in the environment, as the README asks, not in the file.
        env = {"CRONRACE_STORE_URL": server.url}
        config = _config(tmp_path / "cronrace.toml", agent_table("fleet") + WITNESS_JOB)
        mount = ["-v", f"{config}:{CONFIG_IN_IMAGE}:ro", "-e", f"CRONRACE_STORE_URL={server.url}"]
        code, out, err = sidecars.once(
            *mount, built.image, "db", "upgrade", "--config", CONFIG_IN_IMAGE
        )
        assert code == 0, out + err
        assert re.fullmatch(r"schema 'cronrace' upgraded from version 0 to \d+", out.strip()), out
        _run_fleet(
            sidecars, config, make_witness(tmp_path / "witness"), record_property, "PostgreSQL", env
        )
    finally:
        sidecars.remove_all()
        server.cleanup()
