"""The peer's environment: arq in a virtual environment of its own, made on demand.

arq pins ``redis<6``; installing it beside cronrace would downgrade cronrace's redis-py.
So the peer gets ``benchmarks/.venv-peer`` (git-ignored), created with ``python -m venv``
and ``pip install arq`` the first time a run needs it, and its workers run as
subprocesses of that interpreter (:mod:`benchmarks.peer_arq`). When it cannot be made
(no network to the package index, say) the run reports the peer as unavailable, with
pip's reason, and carries on without it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
PEER_VENV = BENCH_DIR / ".venv-peer"
PEER_SCRIPT = BENCH_DIR / "peer_arq.py"
ARQ_REQUIREMENT = "arq>=0.26"


@dataclass(frozen=True)
class Peer:
    """Where the peer's interpreter is, or why there is none."""

    python: Path | None
    version: str
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.python is not None


def _python() -> Path:
    return PEER_VENV / "bin" / "python"


def _arq_version(python: Path) -> str | None:
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import arq.version, redis; print(arq.version.VERSION, redis.__version__)",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return None
    arq_version, redis_version = probe.stdout.split()
    return f"{arq_version} (its redis-py {redis_version})"


def ensure_peer(*, with_uvloop: bool) -> Peer:
    """Return the peer's interpreter, creating its virtual environment when missing."""
    python = _python()
    if python.exists() and (version := _arq_version(python)):
        if with_uvloop and not _has_module(python, "uvloop"):
            _pip(python, ["uvloop"])
        return Peer(python, version)
    try:
        if not python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(PEER_VENV)],
                check=True,
                capture_output=True,
                text=True,
            )
        packages = [ARQ_REQUIREMENT] + (["uvloop"] if with_uvloop else [])
        failure = _pip(python, packages)
        if failure:
            return Peer(None, "", f"pip install {' '.join(packages)} failed: {failure}")
    except (OSError, subprocess.CalledProcessError) as exc:
        return Peer(None, "", f"could not create {PEER_VENV}: {exc}")
    version = _arq_version(python)
    if version is None:
        return Peer(None, "", "arq installed but does not import")
    return Peer(python, version)


def _has_module(python: Path, module: str) -> bool:
    probe = subprocess.run(
        [str(python), "-c", f"import {module}"], capture_output=True, check=False
    )
    return probe.returncode == 0


def _pip(python: Path, packages: list[str]) -> str:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"


def uvloop_installed() -> bool:
    """Whether this interpreter (the fleet's) has uvloop."""
    return importlib.util.find_spec("uvloop") is not None
