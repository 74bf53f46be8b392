"""Fleet processes seen from the harness: spawn, talk JSON lines, pause, collect.

Both :mod:`benchmarks.worker` (cronrace) and :mod:`benchmarks.peer_arq` (the peer) speak
the same protocol, so one :class:`Fleet` drives either.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent


class FleetError(RuntimeError):
    """A fleet process died or did not answer in time."""


@dataclass
class Proc:
    index: int
    popen: subprocess.Popen[str]
    stderr_path: Path
    result_path: Path
    stderr_file: TextIO
    ready: bool = False
    done: bool = False
    startup_s: float = 0.0
    #: CPU the process spent from its start until every agent was seeded.
    startup_cpu_s: float = 0.0
    #: Resident memory its agents grew the process by when they were ready, MB.
    startup_rss_mb: float = 0.0
    #: While starting: agents seeded, CPU and longest loop stall so far (``starting``).
    progress: dict[str, Any] = field(default_factory=dict)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.popen.stdin
        if stdin is None or self.popen.poll() is not None:
            return
        try:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def stderr_tail(self, limit: int = 600) -> str:
        if not self.stderr_file.closed:
            self.stderr_file.flush()
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:].strip()


@dataclass
class Fleet:
    """The processes of one benchmark cell."""

    workdir: Path
    events: queue.Queue[tuple[int, dict[str, Any]]] = field(default_factory=queue.Queue)
    procs: list[Proc] = field(default_factory=list)

    def spawn(self, argv: list[str], config: dict[str, Any]) -> Proc:
        """Start one process; its config gets ``result_path`` added."""
        index = len(self.procs)
        self.workdir.mkdir(parents=True, exist_ok=True)
        result_path = self.workdir / f"proc{index}.json"
        stderr_path = self.workdir / f"proc{index}.log"
        config = {**config, "result_path": str(result_path)}
        stderr_file = stderr_path.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        popen = subprocess.Popen(
            [*argv, json.dumps(config)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
            bufsize=1,
            env=env,
        )
        proc = Proc(index, popen, stderr_path, result_path, stderr_file)
        self.procs.append(proc)
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: Proc) -> None:
        assert proc.popen.stdout is not None
        for line in proc.popen.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.put((proc.index, event))
        self.events.put((proc.index, {"ev": "exit"}))

    def next_event(self, until_s: float) -> tuple[int, dict[str, Any]] | None:
        """The next event, or None once wall time ``until_s`` has come."""
        timeout = until_s - time.time()
        if timeout <= 0:
            return None
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def handle(self, index: int, event: dict[str, Any]) -> None:
        proc = self.procs[index]
        if event["ev"] == "ready":
            proc.ready = True
            proc.startup_s = float(event.get("startup_s", 0.0))
            proc.startup_cpu_s = float(event.get("startup_cpu_s", 0.0))
            proc.startup_rss_mb = float(event.get("startup_rss_mb", 0.0))
        elif event["ev"] == "starting":
            proc.progress = event
        elif event["ev"] == "done":
            proc.done = True
        elif event["ev"] == "exit" and not proc.done:
            raise FleetError(
                f"fleet process {index} exited with {proc.popen.wait()}: {proc.stderr_tail()}"
            )

    def broadcast(self, message: dict[str, Any]) -> None:
        for proc in self.procs:
            proc.send(message)

    def pause(self, index: int) -> None:
        self.procs[index].popen.send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        self.procs[index].popen.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Ask every process to stop; return their results (``{}`` for one that had none)."""
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGCONT)
        self.broadcast({"cmd": "stop"})
        deadline = time.time() + timeout_s
        while not all(proc.done or proc.popen.poll() is not None for proc in self.procs):
            got = self.next_event(deadline)
            if got is None:
                break
            index, event = got
            if event["ev"] == "done":
                self.procs[index].done = True
        results = []
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
            proc.stderr_file.close()
            try:
                results.append(json.loads(proc.result_path.read_bytes()))
            except (OSError, ValueError):
                results.append({})
        return results

    def kill(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait()
            proc.stderr_file.close()
