"""Evidence that no fault can reach: a second redis-server the handlers log to.

Fault tests start real ``cronrace run tests.faults.app:agent`` processes against one
redis-server (the one the faults hit: stopped, wiped, flushed, garbage written into it) and
point the handlers at a *witness*: another redis-server, started by the test and never
touched by a fault. Every handler event (start, end, cancelled) is one ``RPUSH`` there, so
the verdict (duplicates, misses, overlapping runs, fence order) is read from what the
handlers really did, not from what the faulty Redis remembers.

Usage::

    def test_something(redis_server, witness, namespace):
        procs = [start_node(redis_server.url, namespace, f"n{i}", witness) for i in range(3)]
        try:
            ...  # inject the fault
        finally:
            stop_all(procs)
        verdict = judge(witness.events(), "fast", first_tick_s=..., last_tick_s=...)
        assert verdict.duplicates == [] and verdict.missed == [] and verdict.overlaps == []
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
import redis

from cronrace.model.records import RunRecord
from cronrace.stores.redis import Store

ROOT = Path(__file__).resolve().parents[2]

#: How close (seconds) an end may come after a newer start before it counts as an overlap:
#: the two events are written by different processes whose clocks are one machine's.
OVERLAP_SLACK_S = 0.05


@dataclass
class Witness:
    """A list on the witness server that one test's handlers append their events to."""

    url: str
    key: str

    def env(self) -> dict[str, str]:
        """The environment that points ``tests.faults.app`` at this witness."""
        return {"FAULT_WITNESS_URL": self.url, "FAULT_WITNESS_KEY": self.key}

    def events(self) -> list[dict[str, Any]]:
        """Every event written so far, in the order the witness received them."""
        client = redis.Redis.from_url(self.url)
        try:
            return [orjson.loads(raw) for raw in client.lrange(self.key, 0, -1)]
        finally:
            client.close()

    def started_ticks(self, jobs: Iterable[str]) -> dict[str, list[int]]:
        """The ticks each of ``jobs`` started, in the order the witness received them."""
        out: dict[str, list[int]] = {job: [] for job in jobs}
        for event in self.events():
            if event["event"] == "start" and event["job"] in out:
                out[event["job"]].append(event["tick"])
        return out

    def all_started_from(self, jobs: Iterable[str]) -> int:
        """Once every one of ``jobs`` has started, the newest of their first ticks; else 0."""
        ticks = self.started_ticks(jobs)
        return max(min(t) for t in ticks.values()) if all(ticks.values()) else 0

    def every_job_reached(self, jobs: Iterable[str], tick_s: int) -> bool:
        """Whether every one of ``jobs`` has started a tick at or after ``tick_s``."""
        return all(ticks and max(ticks) >= tick_s for ticks in self.started_ticks(jobs).values())

    def wait_for(self, predicate: Any, *, timeout_s: float, what: str) -> list[dict[str, Any]]:
        """Poll the events until ``predicate(events)`` is true; fail after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            evs = self.events()
            if predicate(evs):
                return evs
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
            time.sleep(0.05)


def start_node(
    url: str,
    namespace: str,
    node: str,
    witness: Witness,
    *,
    env: Mapping[str, str] | None = None,
    stderr_dir: Path | None = None,
    metrics_port: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start one real agent process running ``tests.faults.app:agent``.

    Args:
        url: the Redis the fleet meets on (the one faults are injected into).
        namespace: the fleet's namespace.
        node: the node id.
        witness: where the handlers log their events.
        env: extra environment (``FAULT_SLOW_S``, ``CRONRACE_*`` settings, ...).
        stderr_dir: keep the agent's log as ``<node>.err`` there (for post-mortems).
        metrics_port: serve /metrics and /readyz on this loopback port (default: none).
    """
    full_env = {
        **os.environ,
        "CRONRACE_STORE_URL": url,
        "CRONRACE_NAMESPACE": namespace,
        "CRONRACE_NODE_ID": node,
        "CRONRACE_HEARTBEAT_S": "0.5",
        "CRONRACE_SHUTDOWN_GRACE_S": "1",
        "PYTHONPATH": str(ROOT),
        **witness.env(),
        **(env or {}),
    }
    stderr: Any = subprocess.DEVNULL
    if stderr_dir is not None:
        stderr = (stderr_dir / f"{node}.err").open("ab")
    argv = [sys.executable, "-m", "cronrace", "run", "tests.faults.app:agent"]
    if metrics_port is not None:
        argv += ["--metrics-address", f"127.0.0.1:{metrics_port}"]
    try:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    finally:
        if stderr is not subprocess.DEVNULL:
            stderr.close()


def stop_all(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 10) -> None:
    """SIGCONT + SIGTERM every process still alive, wait for it, SIGKILL stragglers."""
    alive = [proc for proc in procs if proc.poll() is None]
    for proc in alive:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
    for proc in alive:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sleep_until_fraction(fraction: float) -> None:
    """Sleep until the wall clock's fractional second reaches ``fraction`` (0 <= f < 1).

    ``sleep_until_fraction(0.5)`` lands mid-second, when no claim of a 1-second job is in
    flight; ``sleep_until_fraction(0.005)`` lands a few ms after a tick, inside the
    claim/decision window.
    """
    time.sleep((fraction - time.time() % 1.0) % 1.0)


@dataclass
class Verdict:
    """What the witness saw of one job between two ticks."""

    job: str
    ticks: list[int]
    duplicates: list[int]
    missed: list[int]
    overlaps: list[tuple[int, int]] = field(default_factory=list)
    fence_disorder: list[tuple[int, int]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.job}: {len(self.ticks)} ticks started, duplicates={self.duplicates}, "
            f"missed={self.missed}, overlaps={self.overlaps}, "
            f"fence_disorder={self.fence_disorder}"
        )


def fence_disorder(starts: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Pairs ``(older tick's fence, newer tick's fence)`` whose order no decision explains.

    The invariant: fences rise in the order decisions grant them. Ticks decided in tick
    order (the rule) thus have their fences in tick order. A tick decided late, after a
    newer one (its winner's answer was held back: a row lock, a slot migration, a retry;
    README "Fences follow decisions, not ticks"), is granted after it and gets the higher
    fence: it runs after that run, so to a receiver it is the newer writer, and fencing
    refuses the earlier one's stale writes as it should (a fence below the newer tick's
    would have its own writes refused). So an older tick with a fence not below a newer
    tick's is disorder unless it started after that tick's run had started (every process
    stamps ``wall`` from the one machine's clock); overlaps are judged apart.
    """
    runs = sorted((e["tick"], e["fence"], e["wall"]) for e in starts)
    return [
        (older[1], newer[1])
        for i, older in enumerate(runs)
        for newer in runs[i + 1 :]
        if newer[0] > older[0] and newer[1] <= older[1] and not older[2] > newer[2]
    ]


def judge(
    events: list[dict[str, Any]],
    job: str,
    *,
    first_tick_s: int,
    last_tick_s: int,
    every_s: int = 1,
    excused: Iterable[int] = (),
    leased: bool = True,
) -> Verdict:
    """Count duplicates, misses, overlapping runs and fence disorder for ``job``.

    Args:
        events: the witness's events.
        job: the job to judge.
        first_tick_s, last_tick_s: the window of ticks that must each have started once
            (inclusive; ticks outside it are still checked for duplicates).
        every_s: the job's period.
        excused: ticks allowed to be missing (ones no live node could have run; say why
            at the call site).
        leased: check overlaps (False for ``overlap="allow"`` jobs).
    """
    starts = [e for e in events if e["job"] == job and e["event"] == "start"]
    counts = Counter(e["tick"] for e in starts)
    duplicates = sorted(t for t, n in counts.items() if n > 1)
    expected = set(range(first_tick_s, last_tick_s + 1, every_s)) - set(excused)
    missed = sorted(expected - set(counts))
    verdict = Verdict(job, sorted(counts), duplicates, missed)
    verdict.fence_disorder = fence_disorder(starts)
    if leased:
        began = {e["fence"]: e["wall"] for e in starts}
        ended = {
            e["fence"]: e["wall"]
            for e in events
            if e["job"] == job and e["event"] in ("end", "cancelled")
        }
        for fence, end in ended.items():
            for newer, start in began.items():
                if newer > fence and start + OVERLAP_SLACK_S < end and began.get(fence, 0) < start:
                    verdict.overlaps.append((fence, newer))
    return verdict


def log_lines(stderr_dir: Path, ticks: Iterable[int], limit: int = 60) -> str:
    """The agents' log lines (``<node>.err`` in ``stderr_dir``) that name one of ``ticks``.

    For assertion messages: a failed verdict then shows what the nodes said about the ticks
    in question, since the temporary directory may be gone by the time anyone looks.
    """
    wanted = {f"tick={tick}" for tick in ticks}
    found = [
        f"{path.stem}: {line}"
        for path in sorted(stderr_dir.glob("*.err"))
        for line in path.read_text(errors="replace").splitlines()
        if any(word in line for word in wanted)
    ]
    return "\n".join(found[:limit])


def run_records(url: str, namespace: str, job: str, limit: int = 500) -> list[RunRecord]:
    """The newest ``limit`` run records of ``job`` in the fleet's Redis, newest first."""

    async def read() -> list[RunRecord]:
        store = Store.from_url(url, namespace)
        try:
            return await store.history(job, limit)
        finally:
            await store.aclose()

    return anyio.run(read)


def decided_late_or_overlapping(
    records: Iterable[RunRecord],
    events: list[dict[str, Any]],
    job: str,
    *,
    release_slack_s: float = 1.0,
) -> set[int]:
    """Ticks of ``job`` not run, but decided so under its policies (recorded, not lost).

    - ``missed``: the nodes came to the tick too late and the catch-up policy (``latest``)
      fired a newer one, or did not fire a tick decided after its window: the record names
      the range (``tick_s`` to ``last_tick_s``) and counts it.
    - ``skipped:overlap`` for a run still going at the decision, or one that had ended at
      most ``release_slack_s`` before it (its release on the wire; a loaded machine). A
      run goes from its grant (its ``granted`` record: the lease is taken then, the
      handler starts when the answer is back, a few ms later) to its end.

    Anything else missing was lost. A skip for a run that had ended long before its
    decision (a release that never came) is not excused here.
    """
    records = list(records)
    starts = {e["fence"]: e["wall"] for e in events if e["job"] == job and e["event"] == "start"}
    for record in records:
        if record.job == job and record.outcome == "granted" and record.fence in starts:
            starts[record.fence] = min(starts[record.fence], record.finished_ms / 1000)
    ended = {e["fence"]: e["wall"] for e in events if e["job"] == job and e["event"] == "end"}
    spans = [(at, ended.get(fence, float("inf"))) for fence, at in starts.items()]
    excused: set[int] = set()
    for record in records:
        if record.job != job:
            continue
        if record.outcome == "missed":
            excused |= set(range(record.tick_s, max(record.tick_s, record.last_tick_s) + 1))
        elif record.outcome == "skipped:overlap":
            decided_s = record.finished_ms / 1000
            if any(s <= decided_s and e >= decided_s - release_slack_s for s, e in spans):
                excused.add(record.tick_s)
    return excused
