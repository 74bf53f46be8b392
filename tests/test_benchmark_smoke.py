"""The benchmark harness keeps working: the quick mode's smallest cell runs and checks out.

Correctness only, never timing: the machine running the tests may be busy.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.redis


def test_smallest_quick_cell_fires_every_tick_once_and_losers_send_one_claim(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = dict(part.split("=", 1) for part in done.stdout.strip().splitlines()[-1].split())
    assert figures["duplicates"] == "0"
    assert figures["missed"] == "0"
    assert figures["claims_per_node_job_tick"] == "1.00"
    assert figures["rtt_per_node_wake"] == "1.00"
    with (tmp_path / "fleet.csv").open() as rows:
        (row,) = csv.DictReader(rows)
    assert row["status"] == "ok"
    assert float(row["loser_cmds_per_node_job_tick"]) == 1.0
    assert int(row["record_duplicates"]) == 0
    assert int(row["record_missed"]) == 0
    assert int(row["runs_in_window"]) == int(row["jobs"]) * int(row["ticks"])
