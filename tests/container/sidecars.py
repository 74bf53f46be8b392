"""Sidecar containers as a user runs them, and the witness their one-second job writes to.

Each container gets the image's default command (``cronrace run --config
/etc/cronrace/cronrace.toml``) with a config file mounted there, read-only. The job's target
is a command that appends ``<tick> <node> <fence>`` to a file in a directory mounted from
the host: the evidence lives outside the containers, so a stopped or killed container
cannot take it along, and every run of every container lands in the same file.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.container.podman import LABEL, ULIMITS, Podman
from tests.redis_server import free_port

CONFIG_IN_IMAGE = "/etc/cronrace/cronrace.toml"
WITNESS_IN_IMAGE = "/witness"
#: The sidecar's stop: runs in hand get this long; `podman stop` waits longer before SIGKILL.
SHUTDOWN_GRACE_S = 5
STOP_TIMEOUT_S = 30

_names = itertools.count()


def agent_table(namespace: str, *, store_url: str | None = None) -> str:
    """The ``[agent]`` table of the fleet's config (the store may come from the environment)."""
    store = f'store_url = "{store_url}"\n' if store_url else ""
    return (
        f'[agent]\n{store}namespace = "{namespace}"\nlog_format = "json"\n'
        f"shutdown_grace_s = {SHUTDOWN_GRACE_S}\n"
    )


#: How long each run of the witness job lasts: a stop always finds runs in hand.
RUN_S = 1.5

#: A job every second whose run writes ``start <tick> <node> <fence>`` to the witness file,
#: lasts RUN_S, and writes ``end ...``: a run cut short by a stop leaves no end. Overlapping
#: runs are allowed (each tick is still claimed once), so that the job runs every tick.
WITNESS_JOB = f"""
[[jobs]]
name = "witness"
schedule = "* * * * * *"
overlap = "allow"
[jobs.command]
argv = ["sh", "-c", '''
run="$CRONRACE_TICK $CRONRACE_NODE $CRONRACE_FENCE"
echo "start $run" >> {WITNESS_IN_IMAGE}/runs
sleep {RUN_S}
echo "end $run" >> {WITNESS_IN_IMAGE}/runs
''']
timeout_s = 10
"""


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def http_status(url: str) -> int | None:
    """The status ``url`` answers with, or None when nothing answers."""
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None


@dataclass
class Sidecar:
    """One running container of the image."""

    name: str
    node: str
    metrics_port: int
    #: From `podman run` until ``/readyz`` answered 200 (set by :meth:`Sidecars.wait_ready`).
    ready_s: float = 0.0
    started: float = field(default_factory=time.monotonic)


@dataclass
class Stopped:
    """How a `podman stop` (SIGTERM to PID 1) ended."""

    exit_code: int
    stop_s: float
    logs: str


class Sidecars:
    """The containers one test starts; :meth:`remove_all` (its finalizer) leaves none."""

    def __init__(self, podman: Podman, image: str) -> None:
        self.podman = podman
        self.image = image
        self.names: list[str] = []

    def _name(self, role: str) -> str:
        name = f"cronrace-test-{os.getpid()}-{next(_names)}-{role}"
        self.names.append(name)
        return name

    def once(self, *args: str, role: str = "cmd", timeout_s: float = 120) -> tuple[int, str, str]:
        """``podman run --rm IMAGE ...``: exit code, stdout, stderr (without podman's own)."""
        name = self._name(role)
        done = self.podman(
            "run", "--rm", "--name", name, "--label", LABEL, "--network", "host", *ULIMITS,
            *args, timeout_s=timeout_s, check=False,
        )  # fmt: skip
        stderr = "\n".join(line for line in done.stderr.splitlines() if "level=" not in line)
        return done.returncode, done.stdout, stderr

    def start(
        self,
        node: str,
        config: Path,
        *,
        witness: Path | None = None,
        env: Mapping[str, str] | None = None,
        network: Sequence[str] = ("--network", "host"),
        metrics_address: str | None = None,
    ) -> Sidecar:
        """Start one sidecar in the background with ``config`` mounted where the image reads it.

        On the host's network (the default) it serves its metrics on a free port, bound to
        0.0.0.0; ``metrics_address`` and ``network`` change that (a published port).
        """
        port = free_port()
        address = metrics_address or f"0.0.0.0:{port}"
        name = self._name(node)
        mounts = ["-v", f"{config}:{CONFIG_IN_IMAGE}:ro"]
        if witness is not None:
            mounts += ["-v", f"{witness}:{WITNESS_IN_IMAGE}"]
        environment = {"CRONRACE_NODE_ID": node, "CRONRACE_METRICS_ADDRESS": address, **(env or {})}
        sidecar = Sidecar(name, node, port)
        self.podman(
            "run", "-d", "--name", name, "--label", LABEL, *network, *ULIMITS, *mounts,
            *(arg for key, value in environment.items() for arg in ("-e", f"{key}={value}")),
            self.image, timeout_s=120,
        )  # fmt: skip
        return sidecar

    def state(self, sidecar: Sidecar) -> str:
        return self.podman(
            "inspect", "--format", "{{.State.Status}}", sidecar.name, check=False
        ).stdout.strip()

    def logs(self, sidecar: Sidecar) -> str:
        done = self.podman("logs", sidecar.name, check=False)
        return done.stdout + done.stderr

    def wait_ready(self, sidecar: Sidecar, url: str | None = None, timeout_s: float = 60) -> None:
        """Wait until ``/readyz`` answers 200 (on the host, by default); note how long it took."""
        url = url or f"http://127.0.0.1:{sidecar.metrics_port}/readyz"

        def ready() -> bool:
            if http_status(url) == 200:
                return True
            if self.state(sidecar) not in ("created", "running"):
                raise AssertionError(f"{sidecar.name} exited:\n{self.logs(sidecar)[-2000:]}")
            return False

        wait_until(ready, timeout_s=timeout_s, what=f"{sidecar.name} ready at {url}")
        sidecar.ready_s = time.monotonic() - sidecar.started

    def healthcheck(self, sidecar: Sidecar) -> tuple[int, str]:
        """The image's HEALTHCHECK, run now (``podman healthcheck run``): exit code, output."""
        done = self.podman("healthcheck", "run", sidecar.name, check=False)
        return done.returncode, done.stdout.strip()

    def stop(self, sidecar: Sidecar) -> Stopped:
        """``podman stop``: SIGTERM to PID 1, SIGKILL only after ``STOP_TIMEOUT_S``."""
        started = time.monotonic()
        self.podman("stop", "-t", str(STOP_TIMEOUT_S), sidecar.name, timeout_s=STOP_TIMEOUT_S + 30)
        stop_s = time.monotonic() - started
        code = self.podman("inspect", "--format", "{{.State.ExitCode}}", sidecar.name).stdout
        return Stopped(int(code.strip()), stop_s, self.logs(sidecar))

    def remove_all(self) -> None:
        self.podman.remove(*self.names)


# -- the witness ----------------------------------------------------------------------------


def make_witness(directory: Path) -> Path:
    """A directory the containers' user (10001) can write its runs into."""
    directory.mkdir()
    directory.chmod(0o777)
    return directory


Run = tuple[int, str, int]  # tick, node, fence


def events(witness: Path) -> list[tuple[str, Run]]:
    """Every start and end written so far, in the order they were written."""
    path = witness / "runs"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        kind, tick, node, fence = line.split()
        out.append((kind, (int(tick), node, int(fence))))
    return out


def runs(witness: Path) -> list[Run]:
    """Every run started so far."""
    return [run for kind, run in events(witness) if kind == "start"]


def in_hand(witness: Path) -> list[Run]:
    """The runs started and not ended yet (after the fleet stopped: those cut short)."""
    written = events(witness)
    ended = {run for kind, run in written if kind == "end"}
    return [run for kind, run in written if kind == "start" and run not in ended]


@dataclass
class Verdict:
    """The fleet's figures over the ticks from the first run to the last."""

    ticks: int
    duplicates: list[int]
    misses: list[int]
    fence_regressions: list[int]
    runs_per_node: dict[str, int]

    def figures(self) -> str:
        return (
            f"{self.ticks} ticks, {len(self.duplicates)} duplicates, {len(self.misses)} misses, "
            f"runs per node {dict(sorted(self.runs_per_node.items()))}"
        )


def judge(written: Sequence[Run]) -> Verdict:
    """Each tick from the first to the last run exactly once, fences rising with ticks."""
    assert written, "no run was written"
    count = Counter(tick for tick, _, _ in written)
    first, last = min(count), max(count)
    by_tick = sorted(written)
    regressions = [b[0] for a, b in itertools.pairwise(by_tick) if b[2] <= a[2] and b[0] > a[0]]
    return Verdict(
        ticks=last - first + 1,
        duplicates=sorted(tick for tick, n in count.items() if n > 1),
        misses=[tick for tick in range(first, last + 1) if tick not in count],
        fence_regressions=regressions,
        runs_per_node=dict(Counter(node for _, node, _ in written)),
    )
