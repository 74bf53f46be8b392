"""Real agent processes on Sentinel: ``SENTINEL FAILOVER`` and a killed primary.

One primary, one replica and three sentinels (``down-after-milliseconds 1000``), three
``cronrace run`` processes, the fault app's 1-second job logging to the witness. The
primary is switched over with ``SENTINEL FAILOVER`` (the old one stays writable for about
ten seconds), then killed; the killed node comes back as a replica that is never promoted
(``replica-priority 0``: one restarted empty must not win a vote before it has synced).
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.witness import Verdict, Witness, judge, start_node, stop_all
from tests.topology import SentinelSet, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@dataclass
class Failover:
    """One fault and what the witness saw around it."""

    kind: str
    at_s: float  # wall time of the fault
    first_fire_after_s: float = 0.0  # first handler start after the fault, minus at_s

    def describe(self) -> str:
        return f"{self.kind}: first fire {self.first_fire_after_s:.1f} s after"


def fast_starts(witness: Witness) -> list[dict[str, Any]]:
    return [e for e in witness.events() if e["job"] == "fast" and e["event"] == "start"]


def wait_fires_after(witness: Witness, after_s: float, count: int, timeout_s: float) -> float:
    """Wait until ``count`` ticks of the fast job started after ``after_s``; the first one's
    start time."""

    def fired() -> list[float]:
        return sorted(e["wall"] for e in fast_starts(witness) if e["wall"] > after_s)

    starts = wait_until(
        lambda: (found := fired()) and len(found) >= count and found,
        timeout_s=timeout_s,
        what=f"{count} fires after {after_s:.1f}",
    )
    return float(starts[0])


@dataclass
class Run:
    """One variant's verdict and faults."""

    claim_replicas: int
    verdict: Verdict
    faults: list[Failover]


def run_variant(directory: Path, namespace: str, witness: Witness, claim_replicas: int) -> Run:
    """Three agents on a fresh Sentinel deployment through both failovers."""
    sentinels = SentinelSet(directory / "redis", down_after_ms=1000, failover_timeout_ms=2000)
    sentinels.start()
    env = {
        "CRONRACE_CLAIM_REPLICAS": str(claim_replicas),
        "CRONRACE_CLAIM_REPLICAS_TIMEOUT_MS": "300",
        "CRONRACE_REDIS_TIMEOUT_S": "1",
    }
    procs = [
        start_node(sentinels.url, namespace, f"s{i}", witness, env=env, stderr_dir=directory)
        for i in range(3)
    ]
    faults: list[Failover] = []
    try:
        first = wait_fires_after(witness, 0, 3, timeout_s=30)
        # 1. SENTINEL FAILOVER: the replica is promoted; the old primary stays writable
        #    until Sentinel converts it (about ten seconds later).
        old = sentinels.primary_port()
        switch = Failover("SENTINEL FAILOVER", time.time())
        sentinels.failover()
        new = sentinels.wait_for_new_primary(old)
        switch.first_fire_after_s = wait_fires_after(witness, switch.at_s, 1, 30) - switch.at_s
        faults.append(switch)
        # Sentinel converts the old primary into a replica of the new one.
        sentinels.wait_replicas_in_sync(new, 1, timeout_s=30)
        wait_until(sentinels.promotable_everywhere, timeout_s=15, what="a promotable replica")
        # 2. SIGKILL of the primary: the sentinels see it down after a second and promote.
        victim = sentinels.node(new)
        assert victim.process is not None
        kill = Failover("SIGKILL of the primary", time.time())
        os.kill(victim.process.pid, signal.SIGKILL)
        promoted = sentinels.wait_for_new_primary(new)
        # The killed node comes back empty, as a replica that is never promoted.
        victim.process.wait()
        victim.process = None
        victim.restart_with("--replicaof", "127.0.0.1", str(promoted), "--replica-priority", "0")
        kill.first_fire_after_s = wait_fires_after(witness, kill.at_s, 3, 40) - kill.at_s
        faults.append(kill)
        end_s = time.time()
    finally:
        stop_all(procs)
        sentinels.stop()
    events = witness.events()
    verdict = judge(events, "fast", first_tick_s=int(first) + 1, last_tick_s=int(end_s) - 2)
    return Run(claim_replicas, verdict, faults)


@pytest.mark.timeout(120)
def test_sentinel_failovers_keep_fences_rising_and_fire_again(
    tmp_path: Path, namespace: str, witness: Witness
) -> None:
    # The two variants run side by side (each its own deployment, namespace and witness
    # list): each spends most of its time waiting for Sentinel.
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                run_variant,
                tmp_path / f"replicas{n}",
                f"{namespace}r{n}",
                Witness(witness.url, f"{witness.key}:r{n}"),
                n,
            )
            for n in (0, 1)
        ]
        runs = [future.result() for future in futures]
    for run in runs:
        report(run)
    for run in runs:
        verdict = run.verdict
        # Fences never go backwards: each new fence is at least the server's TIME in us,
        # so a promoted replica that lacks the last writes cannot hand out a fence again.
        assert verdict.fence_disorder == [], verdict.summary()
        assert verdict.overlaps == [], verdict.summary()
        if run.claim_replicas:
            # A claim counts only once a replica has it: a failover cannot lose a won claim.
            assert verdict.duplicates == [], verdict.summary()
        # Duplicates and misses can only come from the failover windows.
        windows = [(f.at_s - 2, f.at_s + 15) for f in run.faults]
        for tick in verdict.duplicates + verdict.missed:
            assert any(lo <= tick <= hi for lo, hi in windows), verdict.summary()


def report(run: Run) -> None:
    """Print the figures the README quotes (shown with -s, and on failure)."""
    verdict = run.verdict
    print(
        f"\nSentinel, claim_replicas={run.claim_replicas}: {len(verdict.ticks)} ticks, "
        f"duplicates={verdict.duplicates}, missed={len(verdict.missed)} {verdict.missed}, "
        f"fence_disorder={verdict.fence_disorder}; " + "; ".join(f.describe() for f in run.faults)
    )
